package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// Void runs a void job: the subscription was cancelled (or the bill
// withdrawn) while the charge held money that was not captured, the
// discount of the held price ended before its capture, a fine's hold
// could no longer be posted to the registry in time (PostBy), or more of
// the fine was paid outside rebill before its hold was posted
// (HoldOutpaid). The last two are the poster's decisions, which the job
// carries out as made (VoidArgs.Unpostable).
func (p *Pipeline) Void(ctx context.Context, job *river.Job[VoidArgs]) error {
	s := newStep("void", job, job.Args.ChargeID, job.Args.Attempt)
	defer metrics.TimeStage(s.stage)()
	c, err := Get(ctx, p.Pool, s.chargeID)
	if err != nil {
		return err
	}
	wanted := c.VoidRequested || c.outsideRecheck || job.Args.Unpostable || c.discountMissed(p.Clock.Now())
	if !wanted && c.Status == Authorized && c.AttemptCount == s.attempt {
		// A void enqueued without the poster's decision (an older job) works
		// the bound out itself.
		if wanted, err = p.unpostable(ctx, c, p.Clock.Now()); err != nil {
			return err
		}
	}
	if c.Status != Authorized || !wanted || c.AttemptCount != s.attempt {
		metrics.StageRuns.WithLabelValues(s.stage, "stale").Inc()
		return nil
	}
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, ReviewGatewayNotConfigured, err.Error())
	}
	res, err := p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, gateway.OpVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpVoid, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return p.review(ctx, s, c, ReviewVoidRefused, fmt.Sprintf("the gateway refused to void the hold: %s %s", res.Status, res.DeclineCode))
	}
	metrics.StageRuns.WithLabelValues(s.stage, "voided").Inc()
	now := p.Clock.Now()
	return p.record(ctx, s, func(tx pgx.Tx) error {
		if !c.VoidRequested {
			return p.discountReleased(ctx, tx, c, now)
		}
		return p.voidedNotWanted(ctx, tx, c, []Status{Authorized}, now)
	})
}

// voidedNotWanted voids, from one of from, a charge no longer wanted whose
// hold was released, whose authorize never reached the gateway, or whose
// attempt was declined. A
// bill's: its enrollment or the bill was cancelled or withdrawn. A
// subscription's: the subscription was cancelled, or the charge's period
// began while it was unpaid (not owed). The subscription, locked first,
// says which; a past-due one is then told as when a charge is paid, so
// that, owing nothing else any more, it is active again rather than left
// past due with nothing to collect. An unpaid one waits for its card.
func (p *Pipeline) voidedNotWanted(ctx context.Context, tx pgx.Tx, c Charge, from []Status, now time.Time) error {
	const unknownCleared = `, unknown_phase = NULL`
	if c.EnrollmentID != uuid.Nil {
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Voided,
			set: `failure_code = ` + billVoidCodeSQL + unknownCleared}, now,
			byID(c.ID, c.AttemptCount, "")))
		if err == nil {
			p.transitioned(next, "")
		}
		return err
	}
	owner := p.Owners.Of(c)
	sub, err := owner.Lock(ctx, tx, c.OwnerID())
	if err != nil {
		return err
	}
	code := "subscription_cancelled"
	if !sub.Cancelled {
		code = "subscription_unpaid"
	}
	next, err := oneMoved(p.Store.move(ctx, tx, transition{from: from, to: Voided,
		set: `failure_code = $1` + unknownCleared}, now,
		byID(c.ID, c.AttemptCount, ""), code))
	if err != nil {
		return err
	}
	p.transitioned(next, "")
	if sub.Cancelled || sub.PaidChangesNothing || sub.UnpaidSince != nil {
		return nil
	}
	return p.Store.Paid(ctx, tx, owner, next, now)
}
