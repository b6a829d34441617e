package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/subscriptions"
)

// Notices publishes the customer notices the scan finds due at the
// service clock's now: charge.upcoming Upcoming before each renewal (late,
// once, when a clock jump passed the notice time while the renewal is
// still ahead), subscription.trial_will_end TrialWillEnd before a trial
// ends (likewise), and payment_method.expiring once per card in its last
// valid month (UTC). Each event carries a notice key (the unique column
// events.notice_key), so that concurrent scans, several nodes, restarts
// and clock moves publish each notice once. Both carry the subscription.
type Notices struct {
	Pool          *pgxpool.Pool
	Recorder      *Recorder
	Subscriptions *subscriptions.Store
	Upcoming      time.Duration // REBILL_UPCOMING_NOTICE
	// TrialWillEnd is how long before a trial's end its notice is
	// published (REBILL_TRIAL_NOTICE); no experiment changes it.
	TrialWillEnd time.Duration
	BatchSize    int
	// Experiments give the subscriptions in a running notice_lead_time
	// arm that arm's lead instead of Upcoming (nil: none).
	Experiments *experiments.Set
}

// leads are the treatment arms of the notice_lead_time experiments running
// at now, as parallel lists (key, arm, lead in seconds), and the longest
// lead of all.
func (n *Notices) leads(now time.Time) (keys, arms []string, secs []float64, longest time.Duration) {
	longest = n.Upcoming
	for _, e := range n.Experiments.List() {
		if e.Policy != experiments.PolicyNoticeLead || !e.Running(now) {
			continue
		}
		for _, a := range e.Arms {
			if a.Name == experiments.Control || a.Params.Upcoming == 0 {
				continue
			}
			keys, arms, secs = append(keys, e.Key), append(arms, a.Name), append(secs, a.Params.Upcoming.Seconds())
			longest = max(longest, a.Params.Upcoming)
		}
	}
	return keys, arms, secs, longest
}

// SendNotices publishes what is due at now and returns how many.
func (n *Notices) SendNotices(ctx context.Context, now time.Time) (int, error) {
	keys, arms, leads, longest := n.leads(now)
	// The lead is the subscription's notice arm's while its experiment
	// runs, the default's otherwise; the longest lead bounds the range the
	// next_charge_at index is read over. The statuses are parameters: the
	// planner's plan for their values matches them against the predicate
	// of the partial index (subscriptions.Billing).
	up, err := n.each(ctx, now, TypeChargeUpcoming, `SELECT id, 'charge.upcoming:' || id || ':' || extract(epoch FROM next_charge_at)::bigint
		FROM subscriptions s
		WHERE status = ANY($7) AND NOT cancel_at_period_end AND next_period_index >= 1
		  AND next_charge_at > $1 AND next_charge_at <= $1 + make_interval(secs => $6)
		  AND next_charge_at <= $1 + make_interval(secs => coalesce(
			(SELECT a.secs FROM unnest($3::text[], $4::text[], $5::float8[]) AS a(k, arm, secs)
			 WHERE s.experiments->>a.k = a.arm LIMIT 1), $2))
		  AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.notice_key = 'charge.upcoming:' || s.id || ':' || extract(epoch FROM s.next_charge_at)::bigint)
		ORDER BY next_charge_at, id LIMIT $8`, n.Upcoming.Seconds(), keys, arms, leads, longest.Seconds(), fsm.Texts(subscriptions.Billing))
	if err != nil {
		return up, err
	}
	// Once per subscription: a trial ends once. A trial that ended early
	// or was cancelled is no longer trialing, and one with a cancel
	// scheduled at its end will charge nothing, so none is told.
	trial, err := n.each(ctx, now, TypeTrialWillEnd, `SELECT id, 'subscription.trial_will_end:' || id
		FROM subscriptions s
		WHERE status = $3 AND NOT cancel_at_period_end
		  AND trial_end > $1 AND trial_end <= $1 + make_interval(secs => $2)
		  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.notice_key = 'subscription.trial_will_end:' || s.id)
		ORDER BY trial_end, id LIMIT $4`, n.TrialWillEnd.Seconds(), string(subscriptions.Trialing))
	if err != nil {
		return up + trial, err
	}
	utc := now.UTC()
	exp, err := n.each(ctx, now, TypePaymentMethodExpiring, `SELECT id, k FROM (
			SELECT id, 'payment_method.expiring:' || id || ':' || encode(sha256(convert_to(pm_gateway || ':' || pm_token, 'UTF8')), 'hex')
				|| ':' || pm_exp_year || '-' || pm_exp_month AS k
			FROM subscriptions
			WHERE status <> $4 AND pm_exp_year = $2 AND pm_exp_month = $3 AND $1::timestamptz IS NOT NULL) c
		WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.notice_key = c.k)
		ORDER BY id LIMIT $5`, utc.Year(), int(utc.Month()), string(subscriptions.Cancelled))
	return up + trial + exp, err
}

// each runs query ($1 now, then args, then the batch size) for (id,
// notice key) rows in batches, publishing typ for each in the batch's
// transaction.
func (n *Notices) each(ctx context.Context, now time.Time, typ, query string, args ...any) (int, error) {
	limit := max(n.BatchSize, 1)
	total := 0
	for {
		found := 0
		err := pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, query, append(append([]any{now}, args...), limit)...)
			if err != nil {
				return err
			}
			type due struct {
				id  uuid.UUID
				key string
			}
			dues, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (due, error) {
				var d due
				return d, row.Scan(&d.id, &d.key)
			})
			if err != nil {
				return err
			}
			found = len(dues)
			for _, d := range dues {
				sub, err := n.Subscriptions.Get(ctx, tx, d.id)
				if err != nil {
					return err
				}
				if _, err := n.Recorder.Record(ctx, tx, typ, sub.ID, nil, sub.CustomerID, apiobjects.FromSubscription(sub), now, d.key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("%s notices: %w", typ, err)
		}
		total += found
		if found < limit {
			return total, nil
		}
	}
}
