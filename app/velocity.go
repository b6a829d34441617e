package app

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/clock"
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
	slots   *velocity.Slots
}

func newDeclineLimit(limiter *velocity.Limiter, pool *pgxpool.Pool) declineLimit {
	return declineLimit{limiter: limiter, slots: velocity.NewSlots(limiter, velocity.Declines, pool)}
}

func (d declineLimit) Reserve(ctx context.Context, customerID, holder string, mayHaveSent bool) (charges.SlotAnswer, error) {
	a, err := d.slots.Reserve(ctx, customerID, holder, mayHaveSent)
	if err != nil {
		return charges.SlotAnswer{}, err
	}
	verdict := charges.SlotsInFlight
	switch a.Verdict {
	case velocity.Granted:
		verdict = charges.SlotGranted
	case velocity.Reached:
		verdict = charges.DeclinesReached
	}
	return charges.SlotAnswer{Verdict: verdict, DayLeft: a.WindowLeft}, nil
}

func (d declineLimit) Release(ctx context.Context, customerID, holder string) error {
	return d.slots.Release(ctx, customerID, holder)
}

func (d declineLimit) ReleaseTx(ctx context.Context, tx pgx.Tx, customerID, holder string) error {
	return d.slots.ReleaseTx(ctx, tx, customerID, holder)
}

func (d declineLimit) Count(ctx context.Context, tx pgx.Tx, customerID, holder string) error {
	return d.limiter.Count(ctx, tx, customerID, velocity.Declines, holder)
}

// slotSweepInterval is how often River's leader gives back the declines
// slots of attempts that ended without settling theirs: as often as the
// billing scan runs (a minute; a second in dev mode), or every minute
// where the scan is run by hand.
func slotSweepInterval(cfg config.Config) time.Duration {
	if cfg.ScanInterval > 0 {
		return cfg.ScanInterval
	}
	return time.Minute
}

// sweepWorker gives back the slots whose charge attempt is no longer in
// flight (charges.EndedAttempts), read in the sweep's transaction.
func (d declineLimit) sweepWorker(pool *pgxpool.Pool, log zerolog.Logger) *velocity.SweepWorker {
	return &velocity.SweepWorker{Pool: pool, Slots: d.slots, Logger: log.With().Str("component", "velocity").Logger(),
		Ended: func(ctx context.Context, tx pgx.Tx, holders []string) ([]string, error) {
			return charges.EndedAttempts(ctx, tx, holders)
		}}
}
