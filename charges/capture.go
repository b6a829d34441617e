package charges

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/metrics"
)

// Capture runs a capture job.
func (p *Pipeline) Capture(ctx context.Context, job *river.Job[CaptureArgs]) error {
	s := newStep("capture", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
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
	res, err := p.call(ctx, c, gateway.OpCapture, func(ctx context.Context) (gateway.Result, error) {
		return g.Capture(ctx, p.request(c, gateway.OpCapture))
	})
	return p.afterCapture(ctx, s, c, []Status{Capturing}, res, err)
}

// voidInstead enqueues the release of a hold whose subscription was
// cancelled before its capture started (the capture guard refuses such a
// charge).
func (p *Pipeline) voidInstead(ctx context.Context, s stageRun) error {
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil || c.Status != Authorized || !c.VoidRequested || c.AttemptCount != s.attempt {
		return err
	}
	return p.record(ctx, s, func(tx pgx.Tx) error {
		_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
		return err
	})
}

func (p *Pipeline) afterCapture(ctx context.Context, s stageRun, c Charge, from []Status, res gateway.Result, callErr error) error {
	if callErr != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpCapture, callErr)
	}
	if res.Status == gateway.StatusFailed && res.DeclineCode == DeclineExpiredOnCapture {
		metrics.StageRuns.WithLabelValues(s.stage, "hold_expired").Inc()
		return p.reauthorize(ctx, s, c, from, "the gateway refused the capture: "+DeclineExpiredOnCapture)
	}
	if res.Status != gateway.StatusSucceeded {
		metrics.StageRuns.WithLabelValues(s.stage, "refused").Inc()
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused the capture of an authorized hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "succeeded").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if _, err := p.Subscriptions.Lock(ctx, tx, c.SubscriptionID); err != nil {
			return err
		}
		next, err := move(ctx, tx, c.ID, c.AttemptCount, from, Succeeded, now, `unknown_phase = NULL, failure_code = NULL`)
		if err != nil {
			return err
		}
		p.transitioned(next, "")
		return p.Subscriptions.ChargePaid(ctx, tx, next)
	})
}
