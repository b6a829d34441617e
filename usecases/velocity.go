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
