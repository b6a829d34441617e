package charges

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// Capture runs a capture job.
func (p *Pipeline) Capture(ctx context.Context, job *river.Job[CaptureArgs]) error {
	s := newStep("capture", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	return p.captureStep(ctx, s)
}

// captureStep persists that the capture is about to be sent (again, with
// the same key, when a run died or waited after sending it) and sends it.
func (p *Pipeline) captureStep(ctx context.Context, s stageRun) error {
	c, g, err := p.begin(ctx, s, []Status{Authorized, Capturing}, Capturing)
	if errors.Is(err, ErrStale) {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return p.voidInstead(ctx, s)
	}
	if g == nil {
		return err
	}
	if p.holdExpired(c, p.Clock.Now()) {
		// An earlier run may have sent the capture: look it up first.
		return p.replaceExpiredHold(ctx, s, c, g, true)
	}
	return p.sendCapture(ctx, s, c, g)
}

// sendCapture sends the capture of c, which is capturing, and records its
// outcome.
func (p *Pipeline) sendCapture(ctx context.Context, s stageRun, c Charge, g gateway.Gateway) error {
	res, err := p.call(ctx, c, gateway.OpCapture, func(ctx context.Context) (gateway.Result, error) {
		return g.Capture(ctx, p.request(c, gateway.OpCapture))
	})
	return p.afterCapture(ctx, s, c, []Status{Capturing}, res, err)
}

// captureInline captures, in the authorize job's own run, the hold that
// the run recorded together with the capture's "about to call".
func (p *Pipeline) captureInline(ctx context.Context, s stageRun, c Charge) error {
	s.stage = "capture"
	defer metrics.TimeStage(s.stage)()
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, ReviewGatewayNotConfigured, err.Error())
	}
	return p.sendCapture(ctx, s, c, g)
}

// voidInstead settles a charge whose capture the guard refused: a hold
// whose subscription was cancelled, or whose discount ended, before its
// capture started is released; a capture that began before the discount
// ended is looked up first (discountEndedInFlight); and a fine's hold the
// registry did not accept goes to review with its hold released.
func (p *Pipeline) voidInstead(ctx context.Context, s stageRun) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil || c.AttemptCount != s.attempt {
		return err
	}
	switch {
	case c.Status == Capturing && c.discountMissed(p.Clock.Now()):
		return p.discountEndedInFlight(ctx, s, c)
	case c.Status == Authorized && !c.VoidRequested && c.discountMissed(p.Clock.Now()):
		metrics.StageRuns.WithLabelValues(s.stage, "discount_missed").Inc()
	case c.Status == Authorized && !c.VoidRequested && c.RegistryUIN != "":
		accepted, err := posted(ctx, p.Pool, c)
		if err != nil || accepted {
			return err
		}
		metrics.StageRuns.WithLabelValues(s.stage, "not_posted").Inc()
		return p.review(ctx, s, c, ReviewRegistryRejected, "the capture of a fine the payment registry did not accept was refused")
	case c.Status != Authorized || !c.VoidRequested:
		return nil
	}
	return p.record(ctx, s, func(tx pgx.Tx) error {
		_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
		return err
	})
}

// captured is the move that records a capture's success, alone or in a
// batch.
func captured(from []Status) transition {
	return transition{from: from, to: Succeeded, set: "unknown_phase = NULL, failure_code = NULL"}
}

func (p *Pipeline) afterCapture(ctx context.Context, s stageRun, c Charge, from []Status, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpCapture, callErr)
	}
	if res.Status == gateway.StatusFailed && res.DeclineCode == DeclineExpiredOnCapture {
		metrics.StageRuns.WithLabelValues(s.stage, "hold_expired").Inc()
		return p.reauthorize(ctx, s, c, from, FailureHoldExpired, "the gateway refused the capture: "+DeclineExpiredOnCapture)
	}
	if res.Status != gateway.StatusSucceeded {
		metrics.StageRuns.WithLabelValues(s.stage, "refused").Inc()
		return p.review(ctx, s, c, ReviewCaptureRefused, fmt.Sprintf("the gateway refused the capture of an authorized hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "succeeded").Inc()
	if _, ok := p.Owners.Subscriptions.(ManyLocker); ok && c.EnrollmentID == uuid.Nil && slices.Equal(from, []Status{Capturing}) {
		// Recorded with the captures other runs made meanwhile.
		_, err := p.batched().captured.do(ctx, &guardedMove{id: c.ID, attempt: c.AttemptCount, owner: c.OwnerID()})
		if err != nil && !errors.Is(err, ErrStale) { // stale: another run already recorded it
			return fmt.Errorf("%s: record outcome: %w", s.stage, err)
		}
		return nil
	}
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		owner := p.Owners.Of(c)
		locked, err := owner.Lock(ctx, tx, c.OwnerID())
		if err != nil {
			return err
		}
		next, err := oneMoved(p.Store.move(ctx, tx, captured(from), now, byID(c.ID, c.AttemptCount, "")))
		if err != nil {
			return err
		}
		p.transitioned(next, "")
		if locked.PaidChangesNothing {
			return nil
		}
		return p.Store.Paid(ctx, tx, owner, next, now)
	})
}
