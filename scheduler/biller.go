// Package scheduler turns due billing periods into charges. It composes
// the subscriptions and charges packages and owns the periodic scan: the
// one place that decides which periods are owed, so that running it any
// number of times, on any number of nodes, yields one charge per period.
//
// # Catch-up
//
// Every period of an active or past-due subscription whose start has come
// is charged, oldest first, each under its deterministic key. After a long
// outage at most CatchUpLimit periods per subscription are charged; older
// ones are skipped (counted in rebill_periods_skipped_total and logged),
// because charging a customer for years of arrears in one go is a decision
// for people, not a scheduler. Periods of a paused subscription are skipped
// by design: resume starts a new period.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/metrics"
	"github.com/rebill/rebill/subscriptions"
)

// Biller creates charges for due periods and tells subscriptions about
// their charges' outcomes.
type Biller struct {
	Pool          *pgxpool.Pool
	Subscriptions *subscriptions.Store
	Clock         clock.Clock
	// Client enqueues jobs in the caller's transaction; set it once the
	// River client exists (the client needs the workers that need Biller).
	Client       *river.Client[pgx.Tx]
	CatchUpLimit int
	BatchSize    int
	// ScanWorkers is how many batches a scan runs at once (one per core
	// of the database is a good start).
	ScanWorkers int
	ScanTimeout time.Duration
	Logger      zerolog.Logger
}

// Due charges every period of sub that is due now, in tx: the API calls it
// after creating or resuming a subscription so that a period due at once
// is enqueued in the same transaction. Returns the updated subscription.
func (b *Biller) Due(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) (subscriptions.Subscription, error) {
	now := b.Clock.Now()
	if sub.NextChargeAt.After(now) || (sub.Status != subscriptions.Active && sub.Status != subscriptions.PastDue) {
		return sub, nil
	}
	_, advanced, err := b.bill(ctx, tx, []subscriptions.Subscription{sub}, now)
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	if len(advanced) != 1 {
		return b.Subscriptions.Get(ctx, tx, sub.ID) // cancelled at period end instead
	}
	// What the advance wrote, without reading the row back.
	sub.NextPeriodIndex, sub.NextChargeAt, sub.UpdatedAt = advanced[0].index, advanced[0].at, now
	return sub, nil
}

// PaymentMethodChanged retries, at once and with the new card, the
// subscription's declined or failed charges.
func (b *Biller) PaymentMethodChanged(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) error {
	if sub.Status != subscriptions.PastDue {
		return nil
	}
	retried, err := charges.RetryWithNewMethod(ctx, tx, sub.ID, sub.PaymentMethod.Gateway, sub.PaymentMethod.Token, b.Clock.Now())
	if err != nil {
		return err
	}
	return b.enqueueAuthorize(ctx, tx, retried)
}

// Cancelled stops the cancelled subscription's charges: unstarted ones are
// voided, held money is released by void jobs, and nothing is captured.
func (b *Biller) Cancelled(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error {
	flagged, err := charges.RequestVoid(ctx, tx, subscriptionID, b.Clock.Now())
	if err != nil {
		return err
	}
	var jobs []river.InsertManyParams
	for _, c := range flagged {
		if c.Status == charges.Authorized {
			jobs = append(jobs, river.InsertManyParams{Args: charges.VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}})
		}
	}
	return b.insertMany(ctx, tx, jobs)
}

// Resolve records a support decision on a charge in review and tells its
// subscription. Returns charges.ErrNotFound or a *charges.TransitionError.
func (b *Biller) Resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, r charges.Resolution) (charges.Charge, error) {
	c, err := charges.Resolve(ctx, tx, id, r, b.Clock.Now())
	if err != nil {
		return charges.Charge{}, err
	}
	events := Outcomes{Subscriptions: b.Subscriptions}
	if c.Status == charges.Succeeded {
		err = events.ChargePaid(ctx, tx, c.SubscriptionID)
	} else {
		err = events.ChargeFailed(ctx, tx, c.SubscriptionID)
	}
	return c, err
}

// bill creates the charges of every due period of subs (rows locked by
// the caller) and advances each subscription past them, in tx.
func (b *Biller) bill(ctx context.Context, tx pgx.Tx, subs []subscriptions.Subscription, now time.Time) (int, []advance, error) {
	var (
		news     []charges.New
		advanced []advance
	)
	for _, sub := range subs {
		sched := sub.Schedule()
		last := sched.IndexAt(now)
		from := sub.NextPeriodIndex
		if last < from {
			continue
		}
		if sub.CancelAtPeriodEnd && from > 0 {
			// The period that was to be the last has ended.
			if _, _, err := b.Subscriptions.Cancel(ctx, tx, sub.ID, false, subscriptions.System); err != nil {
				return 0, nil, fmt.Errorf("cancel at period end: %w", err)
			}
			if err := b.Cancelled(ctx, tx, sub.ID); err != nil {
				return 0, nil, err
			}
			continue
		}
		if owed := last - from + 1; owed > b.CatchUpLimit {
			skipped := owed - b.CatchUpLimit
			metrics.PeriodsSkipped.Add(float64(skipped))
			b.Logger.Warn().Str("subscription_id", sub.ID.String()).Int("skipped_periods", skipped).
				Msg("missed periods beyond the catch-up limit were skipped, not charged")
			from = last - b.CatchUpLimit + 1
		}
		for i := from; i <= last; i++ {
			p := sched.Period(i)
			news = append(news, charges.New{SubscriptionID: sub.ID, CustomerID: sub.CustomerID, PeriodKey: p.Key,
				PeriodStart: p.Start, Amount: sub.Amount, Currency: sub.Currency,
				Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token})
		}
		advanced = append(advanced, advance{id: sub.ID, index: last + 1, at: sched.Start(last + 1)})
	}
	created, err := charges.CreateMany(ctx, tx, news, now)
	if err != nil {
		return 0, nil, err
	}
	if err := b.enqueueAuthorize(ctx, tx, created); err != nil {
		return 0, nil, err
	}
	if err := advanceAll(ctx, tx, advanced, now); err != nil {
		return 0, nil, err
	}
	metrics.PeriodsEnqueued.Add(float64(len(created)))
	metrics.ChargeTransitions.WithLabelValues(string(charges.Scheduled)).Add(float64(len(created)))
	return len(created), advanced, nil
}

type advance struct {
	id    uuid.UUID
	index int
	at    time.Time
}

func advanceAll(ctx context.Context, tx pgx.Tx, advanced []advance, now time.Time) error {
	if len(advanced) == 0 {
		return nil
	}
	ids := make([][16]byte, len(advanced)) // binary uuid[]: no text round trip
	indexes := make([]int32, len(advanced))
	ats := make([]time.Time, len(advanced))
	for i, a := range advanced {
		ids[i], indexes[i], ats[i] = a.id, int32(a.index), a.at
	}
	_, err := tx.Exec(ctx, `UPDATE subscriptions s SET next_period_index = u.idx, next_charge_at = u.at, updated_at = $4
		FROM unnest($1::uuid[], $2::int[], $3::timestamptz[]) AS u(id, idx, at)
		WHERE s.id = u.id AND s.next_period_index < u.idx`, ids, indexes, ats, now)
	if err != nil {
		return fmt.Errorf("advance subscriptions: %w", err)
	}
	return nil
}

func (b *Biller) enqueueAuthorize(ctx context.Context, tx pgx.Tx, cs []charges.Charge) error {
	jobs := make([]river.InsertManyParams, len(cs))
	for i, c := range cs {
		jobs[i] = river.InsertManyParams{Args: charges.AuthorizeArgs{ChargeID: c.ID, Attempt: c.AttemptCount}}
	}
	return b.insertMany(ctx, tx, jobs)
}

func (b *Biller) insertMany(ctx context.Context, tx pgx.Tx, jobs []river.InsertManyParams) error {
	if len(jobs) == 0 {
		return nil
	}
	if b.Client == nil {
		return errors.New("scheduler: River client not set")
	}
	if _, err := b.Client.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue %d jobs: %w", len(jobs), err)
	}
	return nil
}

// Outcomes moves subscriptions as their charges settle; it is the
// charges.Subscriptions the pipeline reports to.
type Outcomes struct {
	Subscriptions *subscriptions.Store
}

// ChargePaid returns a past-due or unpaid subscription to active once no
// other charge of it is still declined.
func (o Outcomes) ChargePaid(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	// The common case, an active subscription, costs one read and no lock.
	sub, err := o.Subscriptions.Get(ctx, tx, id)
	if err != nil {
		return err
	}
	if sub.Status != subscriptions.PastDue && sub.Status != subscriptions.Unpaid {
		return nil
	}
	if sub, err = o.Subscriptions.GetForUpdate(ctx, tx, id); err != nil {
		return err
	}
	if sub.Status != subscriptions.PastDue && sub.Status != subscriptions.Unpaid {
		return nil
	}
	var stillDeclined bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE subscription_id = $1 AND status = 'declined')`, id).
		Scan(&stillDeclined); err != nil {
		return fmt.Errorf("look for declined charges: %w", err)
	}
	if stillDeclined {
		return nil
	}
	_, _, err = o.Subscriptions.SetStatus(ctx, tx, id, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
	return err
}

// ChargeDeclined makes an active subscription past due.
func (o Outcomes) ChargeDeclined(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return o.moveFrom(ctx, tx, id, []subscriptions.Status{subscriptions.Active}, subscriptions.PastDue, subscriptions.EventPastDue)
}

// ChargeFailed makes an active or past-due subscription unpaid: no new
// period is charged until the payment method changes.
func (o Outcomes) ChargeFailed(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return o.moveFrom(ctx, tx, id, []subscriptions.Status{subscriptions.Active, subscriptions.PastDue}, subscriptions.Unpaid, subscriptions.EventUnpaid)
}

func (o Outcomes) moveFrom(ctx context.Context, tx pgx.Tx, id uuid.UUID, from []subscriptions.Status, to subscriptions.Status, event string) error {
	sub, err := o.Subscriptions.GetForUpdate(ctx, tx, id)
	if err != nil {
		return err
	}
	for _, s := range from {
		if sub.Status == s {
			_, _, err := o.Subscriptions.SetStatus(ctx, tx, id, to, event, subscriptions.System)
			return err
		}
	}
	return nil // paused or cancelled meanwhile: the charge's outcome does not move it
}
