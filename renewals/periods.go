package renewals

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// charge creates the charges of every due period of subs (rows locked by
// the caller) and advances each subscription past them, in tx.
func (r *Renewals) charge(ctx context.Context, tx pgx.Tx, subs []subscriptions.Subscription, now time.Time) (int, []subscriptions.Advance, error) {
	return r.chargeUpTo(ctx, tx, subs, now, now)
}

// chargeUpTo is charge for the periods that began by upTo, written at now.
func (r *Renewals) chargeUpTo(ctx context.Context, tx pgx.Tx, subs []subscriptions.Subscription, upTo, now time.Time) (int, []subscriptions.Advance, error) {
	var (
		news     []charges.New
		advanced []subscriptions.Advance
	)
	for _, sub := range subs {
		sched := sub.Schedule()
		last := sched.IndexAt(upTo)
		from := sub.NextPeriodIndex
		if last < from {
			continue
		}
		if sub.CancelAtPeriodEnd {
			// The period that was to be the last has ended (or, before the
			// first anchor, the trial): no later period is charged.
			if err := r.cancelScheduled(ctx, tx, sub); err != nil {
				return 0, nil, err
			}
			continue
		}
		var (
			adv subscriptions.Advance
			err error
		)
		if news, adv, err = r.periodsDue(ctx, news, sub, sched, from, last, now, renewalPolicies...); err != nil {
			return 0, nil, err
		}
		advanced = append(advanced, adv)
	}
	created, err := r.Charges.Create(ctx, tx, news, now)
	if err != nil {
		return 0, nil, err
	}
	if err := r.Subscriptions.AdvanceAll(ctx, tx, advanced, now); err != nil {
		return 0, nil, err
	}
	metrics.PeriodsEnqueued.Add(float64(len(created)))
	metrics.ChargeTransitions.WithLabelValues(string(charges.Scheduled)).Add(float64(len(created)))
	return len(created), advanced, nil
}

// renewalPolicies are the experiments' policies a renewal's charge takes
// arms of: those that govern what happens to the charge, and the lead of
// the notice before the subscription's next renewal. A routing arm is
// recorded only when the subscription is created, right after the binding
// it governed.
var renewalPolicies = []experiments.Policy{experiments.PolicyDunning, experiments.PolicyGatewayTimeout, experiments.PolicyNoticeLead}

// periodsDue appends to news the charges of sub's periods from..last that
// catch-up charges (older ones are skipped and logged), and returns the
// advance of sub past last. The charges take sub's experiment arms, and
// an arm of every running experiment of policies that admits sub and has
// none recorded yet: a charge's arm is fixed before its first decision
// (its first gateway call, or its first decline's dunning).
func (r *Renewals) periodsDue(ctx context.Context, news []charges.New, sub subscriptions.Subscription, sched period.Schedule, from, last int,
	now time.Time, policies ...experiments.Policy) ([]charges.New, subscriptions.Advance, error) {
	if first := r.firstCaughtUp(sched, from, last, now); first > from {
		skipped := first - from
		metrics.PeriodsSkipped.Add(float64(skipped))
		r.Logger.Warn().Str("subscription_id", sub.ID.String()).Int("skipped_periods", skipped).
			Dur("catch_up_window", r.CatchUpWindow).
			Msg("missed periods older than the catch-up window were skipped, not charged")
		from = first
	}
	var receipt []byte // the subscription's fiscal receipt, carried by each charge
	if sub.Receipt != nil {
		var err error
		if receipt, err = json.Marshal(sub.Receipt); err != nil {
			return news, subscriptions.Advance{}, fmt.Errorf("encode receipt of subscription %s: %w", sub.ID, err)
		}
	}
	rec, _ := r.Experiments.Assign(ctx, Subject(sub), sub.Experiments, now, policies...)
	for i := from; i <= last; i++ {
		p := sched.Period(i)
		news = append(news, charges.New{SubscriptionID: sub.ID, CustomerID: sub.CustomerID, PeriodKey: p.Key,
			PeriodStart: p.Start, Amount: sub.Amount, Currency: sub.Currency,
			Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token, Receipt: receipt, Experiments: rec})
	}
	return news, subscriptions.Advance{ID: sub.ID, NextPeriodIndex: last + 1, NextChargeAt: sched.Start(last + 1), Experiments: rec}, nil
}

// firstCaughtUp is the first period in [from, last] that catch-up charges:
// the oldest one that began within CatchUpWindow of now, and never later
// than last, the current period.
func (r *Renewals) firstCaughtUp(sched period.Schedule, from, last int, now time.Time) int {
	horizon := now.Add(-r.CatchUpWindow)
	for from < last && sched.Start(from).Before(horizon) {
		from++
	}
	return from
}

// cancelScheduled carries out a cancel scheduled at period end: as of the
// end of the current period (the first anchor before billing began).
func (r *Renewals) cancelScheduled(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) error {
	if _, _, err := r.Subscriptions.CancelAt(ctx, tx, sub.ID, sub.NextChargeAt, subscriptions.System); err != nil {
		return fmt.Errorf("cancel at period end: %w", err)
	}
	return r.Cancelled(ctx, tx, sub.ID)
}

// Subject is what experiments know of sub.
func Subject(sub subscriptions.Subscription) experiments.Subject {
	return experiments.Subject{SubscriptionID: sub.ID.String(), CustomerID: sub.CustomerID, Currency: sub.Currency,
		Interval: string(sub.Interval), CreatedAt: sub.CreatedAt}
}
