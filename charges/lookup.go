package charges

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// LookUpOutcome runs a look-up job (kind charge_reconcile, the name queued
// jobs carry): it looks the lost call up by its
// idempotency key and continues from what really happened. When the
// gateway never received the call and the charge is still wanted, it sends
// the very same call again (same key) through the same guarded "about to
// call" move as a first call; when it is no longer wanted (the
// subscription was cancelled), nothing is sent: an authorize is voided,
// and a capture's hold is released. It never creates a replacement.
func (p *Pipeline) LookUpOutcome(ctx context.Context, job *river.Job[LookupArgs]) error {
	s := newStep("reconcile", job, job.Args.ChargeID, job.Args.Attempt)
	s.lookingUp = true
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	op := job.Args.Op
	inFlight := Authorizing
	if op == gateway.OpCapture {
		inFlight = Capturing
	}
	// The charge is this job's while its outcome is unknown, and also once
	// this job began to resend the call (in flight, its unknown phase still
	// set) without recording an answer: the resend got no verdict, or the
	// process died. A rerun then looks the call up again and resends it
	// with the same key; treating it as stale would leave the charge in
	// flight with no job to settle it.
	if (c.Status != Unknown && c.Status != inFlight) || c.AttemptCount != s.attempt || c.UnknownOp != op {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	if op == gateway.OpCapture && c.discountMissed(p.Clock.Now()) {
		return p.discountEndedInFlight(ctx, s, c)
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, ReviewGatewayNotConfigured, err.Error())
	}
	res, err := p.call(ctx, c, op, func(ctx context.Context) (gateway.Result, error) {
		return p.lookup(ctx, g, c, op, true) // not found, it would be sent again
	})
	if errors.Is(err, gateway.ErrUnprovable) {
		return p.review(ctx, s, c, ReviewOutcomeUnprovable, fmt.Sprintf("the %s of attempt %d got no answer and %s can no longer tell whether it happened: check the gateway's dashboard", op, c.AttemptCount, c.Gateway))
	}
	if !errors.Is(err, gateway.ErrNotFound) {
		if op == gateway.OpCapture {
			return p.afterCapture(ctx, s, c, []Status{c.Status}, res, err)
		}
		return p.afterAuthorize(ctx, s, c, []Status{c.Status}, res, err)
	}
	metrics.StageRuns.WithLabelValues(s.stage, "not_found").Inc()
	resend, g, err := p.begin(ctx, s, []Status{Unknown, inFlight}, inFlight)
	if errors.Is(err, ErrStale) {
		return p.notSentNotWanted(ctx, s, c, op)
	}
	if g == nil {
		return err
	}
	if op == gateway.OpCapture && p.holdExpired(resend, p.Clock.Now()) {
		// The capture was just looked up and not found: release the hold.
		return p.replaceExpiredHold(ctx, s, resend, g, false)
	}
	metrics.StageRuns.WithLabelValues(s.stage, "resent").Inc()
	if op == gateway.OpCapture {
		res, err = p.call(ctx, resend, op, func(ctx context.Context) (gateway.Result, error) {
			return g.Capture(ctx, p.request(resend, gateway.OpCapture))
		})
		return p.afterCapture(ctx, s, resend, []Status{Capturing}, res, err)
	}
	res, err = p.call(ctx, resend, op, func(ctx context.Context) (gateway.Result, error) {
		return g.Authorize(ctx, p.request(resend, gateway.OpAuthorize))
	})
	return p.afterAuthorize(ctx, s, resend, []Status{Authorizing}, res, err)
}

// notSentNotWanted settles charge c, whose lost call never reached the
// gateway and which is no longer wanted (cancelled meanwhile, or its
// period not owed): an authorize that never happened leaves nothing to
// release; a capture that never happened leaves the hold, which is voided.
func (p *Pipeline) notSentNotWanted(ctx context.Context, s stageRun, c Charge, op gateway.Op) error {
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if op == gateway.OpAuthorize {
			// Authorizing: a resend of this job's that never reached the
			// gateway, not wanted since.
			return p.voidedNotWanted(ctx, tx, c, []Status{Unknown, Authorizing}, now)
		}
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Unknown}, to: Authorized,
			set: `unknown_phase = NULL`}, now,
			byID(s.chargeID, s.attempt, "")))
		if err != nil {
			return err
		}
		p.transitioned(next, "")
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: next.ID, Attempt: next.AttemptCount}, nil)
		return err
	})
}
