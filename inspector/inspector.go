// Package inspector is the periodic backstop for charges that stopped
// moving: an authorize, capture or hold with no live River job to move it
// on, an unknown outcome whose reconciliation is overdue, and a hold that
// nears its expiry. Each is kicked (its step's job enqueued again, same
// attempt and gateway key) or sent to review with the reason, counted in
// rebill_inspector_stuck_total{kind} and logged.
//
// # Never a second charge
//
// A kick enqueues the very job the charge's step already had: the same
// attempt, so the same gateway idempotency key, and River's unique key per
// step and attempt, so two inspectors (or a kick racing the original job)
// enqueue it once. Each pipeline step is a guarded move from the status it
// expects, so a step that already happened changes nothing. The inspector
// never creates a charge or a new attempt.
package inspector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
)

// Thresholds say when a charge counts as stuck (app/config:
// REBILL_INSPECT_*).
type Thresholds struct {
	// NoJobAfter: an in-flight charge with no live job, unchanged this
	// long, is kicked. At least twice the gateway timeout plus River's
	// rescue time, so a job between two runs is never mistaken for a lost
	// one.
	NoJobAfter time.Duration
	// UnknownAfter: an unknown charge this long past its reconcile
	// schedule goes to review.
	UnknownAfter time.Duration
	// HoldWarnAfter: an authorized charge held this long is reported (its
	// hold nears the gateway's expiry); 0 turns the report off.
	HoldWarnAfter time.Duration
}

// NoJobAfter is the least in-flight age at which a missing job means a
// lost one: twice the gateway timeout plus River's rescue time.
func NoJobAfter(gatewayTimeout, rescueAfter time.Duration) time.Duration {
	return 2*gatewayTimeout + rescueAfter
}

// batch bounds one inspection; the rest waits for the next.
const batch = 500

// Inspector finds and handles stuck charges.
type Inspector struct {
	Pool *pgxpool.Pool
	Jobs charges.JobInserter
	// Charges writes the charges' moves, publishes their events and
	// enqueues their jobs.
	Charges    *charges.Store
	Clock      clock.Clock
	Thresholds Thresholds
	Logger     zerolog.Logger
	// Gateways are the configured gateways' names: each reads 0 on the
	// refund gauges when it has no unknown refund, so that the series
	// (and the alert's query) always exist.
	Gateways []string
}

// What the inspector does with a stuck charge: the closed set of
// rebill_inspector_actions_total's action label (Actions).
const (
	ActionKicked   = "kicked"   // its step's job enqueued again
	ActionReview   = "review"   // sent to the review queue
	ActionReported = "reported" // only logged and counted
)

// Actions lists every action.
var Actions = []string{ActionKicked, ActionReview, ActionReported}

// Summary counts what one inspection did.
type Summary struct {
	Kicked, Review, Reported int
}

// Run inspects once.
func (in *Inspector) Run(ctx context.Context) (Summary, error) {
	var sum Summary
	now := in.Clock.Now()
	stuck, err := charges.FindStuck(ctx, in.Pool, charges.StuckParams{Now: now, NoJobAfter: in.Thresholds.NoJobAfter,
		UnknownAfter: in.Thresholds.UnknownAfter, HoldWarnAfter: in.Thresholds.HoldWarnAfter, Limit: batch})
	if err != nil {
		return sum, err
	}
	if err := in.countRefundsUnknown(ctx, now); err != nil {
		return sum, err
	}
	for _, s := range stuck {
		metrics.InspectorStuck.WithLabelValues(string(s.Kind)).Inc()
		action, detail, err := in.handle(ctx, s, now)
		if errors.Is(err, charges.ErrStale) {
			continue // it moved on meanwhile: not stuck
		}
		if err != nil {
			return sum, err
		}
		switch action {
		case ActionKicked:
			sum.Kicked++
		case ActionReview:
			sum.Review++
		default:
			sum.Reported++
		}
		metrics.InspectorActions.WithLabelValues(action).Inc()
		c := s.Charge
		in.Logger.Warn().Str("charge_id", c.ID.String()).Str("subscription_id", c.SubscriptionID.String()).
			Str("gateway", c.Gateway).Str("status", string(c.Status)).Int("attempt", c.AttemptCount).
			Time("since", c.UpdatedAt).Str("kind", string(s.Kind)).Str("action", action).Str("detail", detail).
			Msg("stuck charge")
	}
	return sum, nil
}

// countRefundsUnknown sets rebill_refunds_unknown and, of them,
// rebill_refunds_unknown_overdue: refunds unknown longer than
// UnknownAfter. A refund's look-up never resends it blind, so one the
// gateway keeps not answering about stays unknown, the customer's money in
// doubt, until a person reads the gateway's dashboard. The gauges are
// reset first so a gateway with none left reads 0, not its last count.
func (in *Inspector) countRefundsUnknown(ctx context.Context, now time.Time) error {
	all, err := charges.CountRefundsUnknown(ctx, in.Pool)
	if err != nil {
		return err
	}
	overdue, err := charges.RefundsStuckUnknown(ctx, in.Pool, now.Add(-in.Thresholds.UnknownAfter))
	if err != nil {
		return fmt.Errorf("count overdue unknown refunds: %w", err)
	}
	metrics.RefundsUnknown.Reset()
	metrics.RefundsUnknownOverdue.Reset()
	for _, gw := range in.Gateways {
		metrics.RefundsUnknown.WithLabelValues(gw).Set(0)
		metrics.RefundsUnknownOverdue.WithLabelValues(gw).Set(0)
	}
	for gw, n := range all {
		metrics.RefundsUnknown.WithLabelValues(gw).Set(float64(n))
		metrics.RefundsUnknownOverdue.WithLabelValues(gw).Set(0)
	}
	for i, r := range overdue {
		metrics.RefundsUnknownOverdue.WithLabelValues(r.Gateway).Inc()
		if i < maxRefundLines {
			in.Logger.Warn().Str("refund_id", r.ID.String()).Str("charge_id", r.ChargeID.String()).Str("gateway", r.Gateway).
				Time("since", r.UpdatedAt).Int("overdue", len(overdue)).Msg("refund unknown overdue")
		}
	}
	return nil
}

// maxRefundLines bounds the overdue refunds one inspection logs (oldest
// first): a gateway silent for hours would otherwise log every one of
// them every minute; the gauge counts them all.
const maxRefundLines = 20

// handle kicks, reviews or reports one stuck charge and names what it did:
// the detail is logged, the charge shows its review code's sentence.
func (in *Inspector) handle(ctx context.Context, s charges.Stuck, now time.Time) (action, detail string, err error) {
	c := s.Charge
	switch s.Kind {
	case charges.StuckHoldExpiring:
		return ActionReported, fmt.Sprintf("authorized since %s: the hold nears its expiry at the gateway", c.UpdatedAt.Format(time.RFC3339)), nil
	case charges.StuckUnknown:
		reason := fmt.Sprintf("inspector: outcome unknown since %s and its reconciliation is more than %s overdue",
			c.UpdatedAt.Format(time.RFC3339), in.Thresholds.UnknownAfter)
		return ActionReview, reason, in.review(ctx, c, charges.ReviewUnknownOverdue, now)
	}
	var kind string
	err = pgx.BeginFunc(ctx, in.Pool, func(tx pgx.Tx) error {
		kind, err = charges.Kick(ctx, tx, in.Jobs, c)
		return err
	})
	if errors.Is(err, charges.ErrNotKicked) {
		reason := fmt.Sprintf("inspector: %s since %s with no live job, and its %s job cannot be enqueued again (%v)",
			c.Status, c.UpdatedAt.Format(time.RFC3339), kind, err)
		return ActionReview, reason, in.review(ctx, c, charges.ReviewStuck, now)
	}
	if err != nil {
		return "", "", err
	}
	return ActionKicked, fmt.Sprintf("%s since %s with no live job: %s enqueued again", c.Status, c.UpdatedAt.Format(time.RFC3339), kind), nil
}

func (in *Inspector) review(ctx context.Context, c charges.Charge, code charges.ReviewCode, now time.Time) error {
	return pgx.BeginFunc(ctx, in.Pool, func(tx pgx.Tx) error {
		_, err := in.Charges.ToReview(ctx, tx, in.Jobs, c, code, now)
		return err
	})
}

// Args is the periodic inspection job.
type Args struct{}

// Kind names the job in River.
func (Args) Kind() string { return "inspector" }

// Worker runs Args.
type Worker struct {
	river.WorkerDefaults[Args]
	Inspector *Inspector
}

// Work inspects once.
func (w *Worker) Work(ctx context.Context, _ *river.Job[Args]) error {
	_, err := w.Inspector.Run(ctx)
	return err
}

// PeriodicJob runs the inspection every interval, and at every leader's
// start.
func PeriodicJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return Args{}, nil },
		&river.PeriodicJobOpts{ID: "inspector", RunOnStart: true})
}
