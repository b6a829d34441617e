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

// leads are the charge.upcoming leads of the treatment arms of the
// notice_lead_time experiments running at now.
func (n *Notices) leads(now time.Time) []subscriptions.NoticeLead {
	var leads []subscriptions.NoticeLead
	for _, e := range n.Experiments.List() {
		if e.Policy != experiments.PolicyNoticeLead || !e.Running(now) {
			continue
		}
		for _, a := range e.Arms {
			if a.Name == experiments.Control || a.Params.Upcoming == 0 {
				continue
			}
			leads = append(leads, subscriptions.NoticeLead{Key: e.Key, Arm: a.Name, Lead: a.Params.Upcoming})
		}
	}
	return leads
}

// SendNotices publishes what is due at now and returns how many.
func (n *Notices) SendNotices(ctx context.Context, now time.Time) (int, error) {
	// The lead is the subscription's notice arm's while its experiment
	// runs, the default's otherwise. A renewal's notice is marked in the
	// transaction that publishes it, so a scan reads the notices due, not
	// every renewal within the lead; the notice key still records a notice
	// published twice (a row of before the mark existed, a concurrent
	// scan) once.
	leads := n.leads(now)
	up, err := n.each(ctx, now, TypeChargeUpcoming, func(tx pgx.Tx, limit int) ([]due, error) {
		renewals, err := n.Subscriptions.RenewalsToNotice(ctx, tx, now, n.Upcoming, leads, limit)
		dues := make([]due, len(renewals))
		for i, r := range renewals {
			dues[i] = due{id: r.ID, key: UpcomingKey(r.ID, r.Charge), renewal: &renewals[i].Charge}
		}
		return dues, err
	}, n.Subscriptions.MarkUpcomingNoticed)
	if err != nil {
		return up, err
	}
	// Once per subscription: a trial ends once. A trial that ended early
	// or was cancelled is no longer trialing, and one with a cancel
	// scheduled at its end will charge nothing, so none is told.
	trial, err := n.each(ctx, now, TypeTrialWillEnd, n.queried(ctx, now, `SELECT id, 'subscription.trial_will_end:' || id
		FROM subscriptions s
		WHERE status = $3 AND NOT cancel_at_period_end
		  AND trial_end > $1 AND trial_end <= $1 + make_interval(secs => $2)
		  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.notice_key = 'subscription.trial_will_end:' || s.id)
		ORDER BY trial_end, id LIMIT $4`, n.TrialWillEnd.Seconds(), string(subscriptions.Trialing)), nil)
	if err != nil {
		return up + trial, err
	}
	utc := now.UTC()
	exp, err := n.each(ctx, now, TypePaymentMethodExpiring, n.queried(ctx, now, `SELECT id, k FROM (
			SELECT id, 'payment_method.expiring:' || id || ':' || encode(sha256(convert_to(pm_gateway || ':' || pm_token, 'UTF8')), 'hex')
				|| ':' || pm_exp_year || '-' || pm_exp_month AS k
			FROM subscriptions
			WHERE status <> $4 AND pm_exp_year = $2 AND pm_exp_month = $3 AND $1::timestamptz IS NOT NULL) c
		WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.notice_key = c.k)
		ORDER BY id LIMIT $5`, utc.Year(), int(utc.Month()), string(subscriptions.Cancelled)), nil)
	return up + trial + exp, err
}

// due is a notice due: its subscription, its notice key and, for a
// renewal's, the next charge it announces.
type due struct {
	id      uuid.UUID
	key     string
	renewal *time.Time
}

// UpcomingKey is the notice key of the charge.upcoming of subscription
// id's renewal at charge: one notice per renewal. The seconds are
// rounded half up, as PostgreSQL's extract(epoch ...)::bigint rounds, so
// the keys of notices published before the renewals were marked match.
func UpcomingKey(id uuid.UUID, charge time.Time) string {
	secs := charge.Unix()
	if charge.Nanosecond() >= int(time.Second/2) {
		secs++
	}
	return fmt.Sprintf("charge.upcoming:%s:%d", id, secs)
}

// queried finds the notices due by query ($1 now, then args, then the
// batch size), whose rows are (subscription id, notice key).
func (n *Notices) queried(ctx context.Context, now time.Time, query string, args ...any) func(pgx.Tx, int) ([]due, error) {
	return func(tx pgx.Tx, limit int) ([]due, error) {
		rows, err := tx.Query(ctx, query, append(append([]any{now}, args...), limit)...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (due, error) {
			var d due
			return d, row.Scan(&d.id, &d.key)
		})
	}
}

// each publishes typ for the notices find returns, in batches of one
// transaction each, and, with mark, marks the batch's renewals noticed in
// it too.
func (n *Notices) each(ctx context.Context, now time.Time, typ string, find func(pgx.Tx, int) ([]due, error),
	mark func(context.Context, pgx.Tx, []subscriptions.Noticed) error) (int, error) {
	limit := max(n.BatchSize, 1)
	total := 0
	for {
		found, published := 0, 0
		err := pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
			dues, err := find(tx, limit)
			if err != nil {
				return err
			}
			found = len(dues)
			var sent map[string]bool
			if mark != nil {
				// Queries that skip the notices already sent need no look-up.
				if sent, err = sentBefore(ctx, tx, dues); err != nil {
					return err
				}
			}
			var noticed []subscriptions.Noticed
			for _, d := range dues {
				if d.renewal != nil {
					noticed = append(noticed, subscriptions.Noticed{ID: d.id, Charge: *d.renewal})
				}
				if sent[d.key] {
					continue
				}
				sub, err := n.Subscriptions.Get(ctx, tx, d.id)
				if err != nil {
					return err
				}
				recorded, err := n.Recorder.Record(ctx, tx, typ, sub.ID, nil, sub.CustomerID, apiobjects.FromSubscription(sub), now, d.key)
				if err != nil {
					return err
				}
				if recorded {
					published++
				}
			}
			if mark == nil {
				return nil
			}
			return mark(ctx, tx, noticed)
		})
		if err != nil {
			return total, fmt.Errorf("%s notices: %w", typ, err)
		}
		total += published
		if found < limit {
			return total, nil
		}
	}
}

// sentBefore returns which of the dues' notice keys an event holds
// already: the renewals of before the mark existed, whose notices went out
// then. The first scan after an upgrade marks them with this one look-up
// a batch, instead of reading each subscription to record nothing.
func sentBefore(ctx context.Context, tx pgx.Tx, dues []due) (map[string]bool, error) {
	if len(dues) == 0 {
		return nil, nil
	}
	keys := make([]string, len(dues))
	for i, d := range dues {
		keys[i] = d.key
	}
	rows, err := tx.Query(ctx, `SELECT notice_key FROM events WHERE notice_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("notices sent before: %w", err)
	}
	sent, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("notices sent before: %w", err)
	}
	found := make(map[string]bool, len(sent))
	for _, k := range sent {
		found[k] = true
	}
	return found, nil
}
