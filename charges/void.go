package charges

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/metrics"
)

// Void runs a void job: the subscription was cancelled (or the bill
// withdrawn) while the charge held money that was not captured, or the
// discount of the held price ended before its capture.
func (p *Pipeline) Void(ctx context.Context, job *river.Job[VoidArgs]) error {
	s := newStep("void", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	if c.Status != Authorized || !(c.VoidRequested || c.discountMissed(p.Clock.Now())) || c.AttemptCount != s.attempt {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, err.Error())
	}
	res, err := p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, gateway.OpVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpVoid, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return p.review(ctx, s, c, fmt.Sprintf("the gateway refused to void the hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "voided").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if !c.VoidRequested {
			return p.discountReleased(ctx, tx, c, now)
		}
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{Authorized}, Voided, now, `failure_code = 'subscription_cancelled'`)
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	})
}
