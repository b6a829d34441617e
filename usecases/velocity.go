package usecases

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/velocity"
)

// limit counts an action of a customer key against l in tx; staff keys
// are exempt. Returns a *velocity.ExceededError over the limit, after
// which tx must roll back.
func (s *Service) limit(ctx context.Context, tx pgx.Tx, caller Caller, l velocity.Limit) error {
	if s.Velocity == nil || caller.CustomerID == "" {
		return nil
	}
	return s.Velocity.Take(ctx, tx, caller.CustomerID, l)
}

// queueLimit is limit queued on b (see velocity.Limiter.QueueTake): the
// returned outcome's Err, once b is sent, is what limit returns. Nil, and
// nothing queued, for staff keys and without limits.
func (s *Service) queueLimit(b *pgx.Batch, caller Caller, l velocity.Limit) *velocity.Taken {
	if s.Velocity == nil || caller.CustomerID == "" {
		return nil
	}
	return s.Velocity.QueueTake(b, caller.CustomerID, l)
}
