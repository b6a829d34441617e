package app

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/config"
	"github.com/rebill/rebill/velocity"
)

func newLimiter(cfg config.Config, clk clock.Clock) *velocity.Limiter {
	return &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{
		velocity.Creations:            cfg.VelocityCreationsPerHour,
		velocity.PaymentMethodChanges: cfg.VelocityCardChangesPerDay,
		velocity.Declines:             cfg.VelocityDeclinesPerDay,
	}}
}

// declineLimit is the declines-per-day limit as the charge pipeline asks
// it (charges.DeclineLimit).
type declineLimit struct {
	limiter *velocity.Limiter
	pool    *pgxpool.Pool
}

func (d declineLimit) Count(ctx context.Context, tx pgx.Tx, customerID string) error {
	return d.limiter.Count(ctx, tx, customerID, velocity.Declines)
}

func (d declineLimit) Reached(ctx context.Context, customerID string) (bool, error) {
	return d.limiter.Reached(ctx, d.pool, customerID, velocity.Declines)
}
