package app

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/secrets"
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
	keys    *secrets.Keyring
}

func newDeclineLimit(cfg config.Config, limiter *velocity.Limiter, pool *pgxpool.Pool, keys *secrets.Keyring) declineLimit {
	slots := velocity.NewSlots(limiter, velocity.Declines, pool)
	slots.ApprovedInFlight = cfg.VelocityApprovedInFlight
	return declineLimit{limiter: limiter, slots: slots, keys: keys}
}

// card names a card to the limit: an HMAC of its gateway and token (a
// vault reference, or a token in clear from before the vault) under a key
// derived from the current encryption key, so the counters hold no token
// and no value that leads to one. A rotation of the key renames every
// card, which forgets their approvals: they are held as new cards until
// approved again, the safe side.
func (d declineLimit) card(c charges.Card) string {
	return hex.EncodeToString(d.keys.Fingerprint(d.keys.Current(), []byte("velocity card\x00"+c.Gateway+"\x00"+c.Token))[:16])
}

func (d declineLimit) Reserve(ctx context.Context, customerID string, card charges.Card, holder string, mayHaveSent bool) (charges.SlotAnswer, error) {
	a, err := d.slots.Reserve(ctx, customerID, d.card(card), holder, mayHaveSent)
	if err != nil {
		return charges.SlotAnswer{}, err
	}
	return slotAnswer(a), nil
}

func (d declineLimit) Wait(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string, job int64) (charges.SlotAnswer, error) {
	a, err := d.slots.Wait(ctx, tx, customerID, d.card(card), holder, job)
	if err != nil {
		return charges.SlotAnswer{}, err
	}
	return slotAnswer(a), nil
}

func slotAnswer(a velocity.Answer) charges.SlotAnswer {
	verdict := charges.SlotsInFlight
	switch a.Verdict {
	case velocity.Granted:
		verdict = charges.SlotGranted
	case velocity.Reached:
		verdict = charges.DeclinesReached
	}
	return charges.SlotAnswer{Verdict: verdict, DayLeft: a.WindowLeft}
}

func (d declineLimit) Release(ctx context.Context, customerID string, card charges.Card, holder string, approved bool) error {
	return d.slots.Release(ctx, customerID, d.card(card), holder, approved)
}

func (d declineLimit) ReleaseTx(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string, approved bool) error {
	return d.slots.ReleaseTx(ctx, tx, customerID, d.card(card), holder, approved)
}

func (d declineLimit) Count(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string) error {
	return d.slots.Decline(ctx, tx, customerID, d.card(card), holder)
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
