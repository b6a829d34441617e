package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// Hold expiry: a card hold lasts a limited time at the gateway (Visa's
// merchant-initiated holds about 4 days 18 hours at Stripe, 7 days at
// YooKassa and T-Bank). A capture that waited longer (its gateway was down,
// its circuit open) is never sent late: the old hold is released, or the
// gateway confirms it is gone, and a new attempt places a new hold under
// new keys. There is never more than one live hold for a charge: the new
// attempt starts only after the old hold is released.

// HoldExpiryMargin is how long before a hold lapses rebill stops starting
// captures of it: the capture must reach the gateway while the hold still
// stands. Holds shorter than two margins use half their lifetime.
const HoldExpiryMargin = time.Hour

// DeclineExpiredOnCapture is the decline code of a capture the gateway
// refused because the hold had lapsed (YooKassa's "expired_on_capture"):
// the hold is gone, and the charge is authorized again.
const DeclineExpiredOnCapture = "expired_on_capture"

// FailureHoldExpired is the failure code of an attempt whose hold lapsed
// before it was captured; the next attempt is under way.
const FailureHoldExpired = "hold_expired"

// holdExpired reports whether c's hold is too old to capture at now.
func (p *Pipeline) holdExpired(c Charge, now time.Time) bool {
	s, ok := p.Gateways.Settings(c.Gateway)
	if !ok || s.HoldLifetime <= 0 || c.AuthorizedAt == nil {
		return false
	}
	margin := min(HoldExpiryMargin, s.HoldLifetime/2)
	return !now.Before(c.AuthorizedAt.Add(s.HoldLifetime - margin))
}

// replaceExpiredHold handles a capturing charge whose hold is too old to
// capture. When a capture of it may already have been sent (lookFirst: an
// earlier run of the step), it is looked up first: a capture that happened
// is the outcome. Otherwise the hold is voided under the attempt's void key;
// a refusal, with no capture found, means the gateway no longer holds it.
// Then a new attempt starts.
func (p *Pipeline) replaceExpiredHold(ctx context.Context, s stageRun, c Charge, g gateway.Gateway, lookFirst bool) error {
	metrics.StageRuns.WithLabelValues(s.stage, "hold_expired").Inc()
	if lookFirst {
		res, err := p.call(ctx, c, gateway.OpCapture, func(ctx context.Context) (gateway.Result, error) {
			return p.lookup(ctx, g, c, gateway.OpCapture, false) // never a late capture
		})
		switch {
		case errors.Is(err, gateway.ErrNotFound):
		case errors.Is(err, gateway.ErrUnprovable):
			return p.review(ctx, s, c, ReviewOutcomeUnprovable, fmt.Sprintf("the hold of attempt %d expired and %s can no longer tell whether its capture happened", c.AttemptCount, c.Gateway))
		case err != nil:
			return p.technicalFailure(ctx, s, c, gateway.OpCapture, err)
		case res.Status == gateway.StatusSucceeded:
			return p.afterCapture(ctx, s, c, []Status{Capturing}, res, nil)
		}
	}
	res, err := p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, gateway.OpVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpVoid, err)
	}
	reason := "hold voided"
	if res.Status != gateway.StatusSucceeded {
		reason = fmt.Sprintf("the gateway no longer holds it (void: %s %s)", res.Status, res.DeclineCode)
	}
	return p.reauthorize(ctx, s, c, []Status{Capturing}, FailureHoldExpired, reason)
}

// reauthorize starts a new attempt of a charge whose hold is gone (voided,
// or lapsed at the gateway), on its subscription's or enrollment's current
// payment method, with new gateway keys, recording code as why. A charge
// no longer wanted (its owner cancelled, its period not owed, its bill
// withdrawn meanwhile) is voided before the new attempt makes any call.
func (p *Pipeline) reauthorize(ctx context.Context, s stageRun, c Charge, from []Status, code, reason string) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		sub, err := p.Owners.Of(c).Lock(ctx, tx, c.OwnerID())
		if err != nil {
			return err
		}
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Scheduled,
			set: newAttempt + `, gateway = $3, pm_token = $4, failure_code = $5, authorized_at = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), now, now, sub.Gateway, sub.Token, code))
		if err != nil {
			return err
		}
		p.transitioned(next, code+": "+reason)
		notOwed := sub.UnpaidSince != nil && !next.PeriodStart.Before(*sub.UnpaidSince)
		if sub.Cancelled || next.VoidRequested || notOwed {
			return p.voidedNotWanted(ctx, tx, next, []Status{Scheduled}, now)
		}
		p.Logger.Warn().Str("charge_id", c.ID.String()).Str("gateway", c.Gateway).Int("attempt", c.AttemptCount).
			Str("failure_code", code).Str("reason", reason).Msg("hold not captured; authorizing again")
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx,
			AuthorizeArgs{ChargeID: next.ID, Attempt: next.AttemptCount}, nil)
		return err
	})
}
