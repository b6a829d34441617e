package renewals

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
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
		due      dueCharges
		advanced []subscriptions.Advance
		applied  []subscriptions.Subscription // whose pending update applied: its event shows the row before the advance
	)
	paid, err := r.firstPeriodsPaid(ctx, tx, subs, upTo)
	if err != nil {
		return 0, nil, err
	}
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
		credit := sub.CreditBalance
		if k, ok := sub.BoundaryIndex(); ok && k <= last {
			// The periods before the boundary are charged at the terms in
			// force at their start, then the pending update applies, before
			// the boundary's period is charged.
			if first := r.firstCaughtUp(sched, from, last, now); first < k {
				if _, err := r.periodsDue(ctx, &due, sub, sched, first, k-1, now, &credit, paid[sub.ID], renewalPolicies...); err != nil {
					return 0, nil, err
				}
			}
			var err error
			if sub, err = r.Subscriptions.ApplyPending(ctx, tx, sub, k); err != nil {
				return 0, nil, err
			}
			sched, from = sub.Schedule(), sub.NextPeriodIndex
			last = sched.IndexAt(upTo)
			applied = append(applied, sub)
		}
		adv, err := r.periodsDue(ctx, &due, sub, sched, from, last, now, &credit, paid[sub.ID], renewalPolicies...)
		if err != nil {
			return 0, nil, err
		}
		advanced = append(advanced, adv)
	}
	created, err := r.Charges.Create(ctx, tx, due.news, now)
	if err != nil {
		return 0, nil, err
	}
	if err := r.Subscriptions.UseCredits(ctx, tx, due.uses, now); err != nil {
		return 0, nil, err
	}
	if err := r.Subscriptions.AdvanceAll(ctx, tx, advanced, now); err != nil {
		return 0, nil, err
	}
	for _, sub := range applied {
		// The updated event was written before the advance: restate it
		// with the row as the transaction leaves it (decision 21).
		after, err := r.Subscriptions.Get(ctx, tx, sub.ID)
		if err != nil {
			return 0, nil, err
		}
		if err := r.Subscriptions.Stored(ctx, tx, after); err != nil {
			return 0, nil, err
		}
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

// dueCharges are the charges of due periods a scan batch creates, and
// the credit they use.
type dueCharges struct {
	news []charges.New
	uses []subscriptions.CreditUse
}

// firstPeriodsPaid are the keys of the first periods of the subscriptions'
// schedules that are due by upTo and already paid, by subscription: a
// resume begins a new schedule whose first period takes the key of its
// start date, which is the key of a period already charged (or paid by
// credit) when that period began the same day. It is that period, paid
// once: it is not charged again, and uses no credit, which would be
// taken for nothing. Only a first period can have a paid key: every
// later one begins at least a day after the schedule's start, which is
// not earlier than any period paid before, and a schedule a pending
// interval change restarts begins at a period no charge reached.
func (r *Renewals) firstPeriodsPaid(ctx context.Context, tx pgx.Tx, subs []subscriptions.Subscription, upTo time.Time) (map[uuid.UUID]string, error) {
	var (
		ids  []uuid.UUID
		keys []string
	)
	for _, sub := range subs {
		if sched := sub.Schedule(); sub.NextPeriodIndex == 0 && !sched.Start(0).After(upTo) {
			ids, keys = append(ids, sub.ID), append(keys, sched.Period(0).Key)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	charged, err := charges.Charged(ctx, tx, ids, keys)
	if err != nil {
		return nil, err
	}
	used, err := r.Subscriptions.CreditUsed(ctx, tx, ids, keys)
	if err != nil {
		return nil, err
	}
	paid := map[uuid.UUID]string{}
	for i, id := range ids {
		if charged[i] || used[i] {
			paid[id] = keys[i]
		}
	}
	return paid, nil
}

// periodsDue appends to due the charges of sub's periods from..last that
// catch-up charges (older ones are skipped and logged), and returns the
// advance of sub past last. The charges take sub's experiment arms, and
// an arm of every running experiment of policies that admits sub and has
// none recorded yet: a charge's arm is fixed before its first decision
// (its first gateway call, or its first decline's dunning). Each period
// uses what it can of credit, which it reduces: a period it covers whole
// has no charge (a charge is never of 0) but is passed all the same. The
// period keyed paidKey is paid already (firstPeriodsPaid): it is passed
// with no charge and no credit used.
func (r *Renewals) periodsDue(ctx context.Context, due *dueCharges, sub subscriptions.Subscription, sched period.Schedule, from, last int,
	now time.Time, credit *int64, paidKey string, policies ...experiments.Policy) (subscriptions.Advance, error) {
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
			return subscriptions.Advance{}, fmt.Errorf("encode receipt of subscription %s: %w", sub.ID, err)
		}
	}
	rec, _ := r.Experiments.Assign(ctx, Subject(sub), sub.Experiments, now, policies...)
	for i := from; i <= last; i++ {
		p := sched.Period(i)
		if p.Key == paidKey {
			continue
		}
		amount, periodReceipt := sub.Amount, receipt
		if *credit > 0 {
			use := min(*credit, amount)
			*credit -= use
			amount -= use
			due.uses = append(due.uses, subscriptions.CreditUse{SubscriptionID: sub.ID, PeriodKey: p.Key, PeriodStart: p.Start, Amount: use})
			if amount == 0 {
				continue
			}
			if sub.Receipt != nil {
				var err error
				if periodReceipt, err = json.Marshal(sub.Receipt.Repriced(amount)); err != nil {
					return subscriptions.Advance{}, fmt.Errorf("encode receipt of subscription %s: %w", sub.ID, err)
				}
			}
		}
		due.news = append(due.news, charges.New{SubscriptionID: sub.ID, CustomerID: sub.CustomerID, PeriodKey: p.Key,
			PeriodStart: p.Start, Amount: amount, Currency: sub.Currency,
			Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token, Receipt: periodReceipt, Experiments: rec})
	}
	return subscriptions.Advance{ID: sub.ID, NextPeriodIndex: last + 1, NextChargeAt: sched.Start(last + 1), Experiments: rec}, nil
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
