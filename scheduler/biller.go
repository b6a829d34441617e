// Package scheduler turns due billing periods into charges. It composes
// the subscriptions and charges packages and owns the periodic scan: the
// one place that decides which periods are owed, so that running it any
// number of times, on any number of nodes, yields one charge per period.
//
// # Which periods are owed
//
// A period is owed when it begins while the subscription is active or past
// due. Periods that begin while it is paused or unpaid are skipped, not
// owed; no period that begins after a scheduled cancel is charged.
//
// # Catch-up
//
// After a long outage the current period and the missed periods that began
// within CatchUpWindow (90 days by default) are charged, oldest first, each
// under its deterministic key; older ones are skipped (counted in
// rebill_periods_skipped_total and logged), because charging a customer for
// years of arrears in one go is a decision for people, not a scheduler.
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
	"github.com/rebill/rebill/subscriptions/period"
)

// Biller creates charges for due periods and tells subscriptions about
// their charges' outcomes.
type Biller struct {
	Pool          *pgxpool.Pool
	Subscriptions *subscriptions.Store
	Clock         clock.Clock
	// Client enqueues jobs in the caller's transaction; set it once the
	// River client exists (the client needs the workers that need Biller).
	Client *river.Client[pgx.Tx]
	// CatchUpWindow: missed periods that began longer ago than this are
	// skipped; the current period is always charged.
	CatchUpWindow time.Duration
	BatchSize     int
	// ScanWorkers is how many batches a scan runs at once (one per core
	// of the database is a good start).
	ScanWorkers int
	ScanTimeout time.Duration
	// ScanInterval is how often the leader scans. A scan during which the
	// clock moved further than this (a dev-clock jump) scans again at once.
	ScanInterval time.Duration
	// Gateways looks a charge's last attempt up before a support retry.
	Gateways interface {
		LiveMoney(ctx context.Context, c charges.Charge) (string, error)
	}
	Logger zerolog.Logger
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

// PaymentMethodChanged applies a card change (or the same card sent again,
// changed false) to the subscription's charges: those not yet started take
// the new card, and those waiting (declined, failed) are retried at once,
// oldest first. An unpaid subscription whose charges are retried with the
// same card becomes past due; a past-due one with nothing left to collect
// becomes active. Returns an error wrapping charges.ErrRetryRefused when
// card-network rules forbid trying the same card again.
func (b *Biller) PaymentMethodChanged(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, actor subscriptions.Actor) (subscriptions.Subscription, error) {
	retried, err := charges.PaymentMethodChanged(ctx, tx, sub.ID, sub.PaymentMethod.Gateway, sub.PaymentMethod.Token, b.Clock.Now())
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	if err := b.enqueueAuthorize(ctx, tx, retried); err != nil {
		return subscriptions.Subscription{}, err
	}
	switch {
	case sub.Status == subscriptions.Unpaid && len(retried) > 0:
		sub, _, err = b.Subscriptions.RetryUnpaid(ctx, tx, sub.ID, actor)
	case sub.Status == subscriptions.PastDue && len(retried) == 0:
		var open bool
		if open, err = charges.HasOpen(ctx, tx, sub.ID); err == nil && !open {
			sub, _, err = b.Subscriptions.SetStatus(ctx, tx, sub.ID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
		}
	}
	return sub, err
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
	c, err := charges.Get(ctx, tx, id)
	if err != nil {
		return charges.Charge{}, err
	}
	events := Outcomes{Subscriptions: b.Subscriptions, Clock: b.Clock}
	if _, err := events.Lock(ctx, tx, c.SubscriptionID); err != nil {
		return charges.Charge{}, err
	}
	if c, err = charges.Resolve(ctx, tx, id, r, b.Clock.Now()); err != nil {
		return charges.Charge{}, err
	}
	if c.Status == charges.Succeeded {
		err = events.ChargePaid(ctx, tx, c)
	} else {
		err = events.ChargeFailed(ctx, tx, c)
	}
	return c, err
}

// Retry starts, at a person's request, a new attempt of a charge in
// requires_review or failed, on its subscription's current payment method,
// with a new gateway key. It first looks the last attempt up at the
// gateway: a retry must never be a second payment, so a capture or a live
// hold there refuses it. Returns charges.ErrNotFound, a
// *charges.TransitionError (from another status, money found at the
// gateway, a cancelled subscription, a charge settled by a person or
// changed meanwhile), or an error wrapping charges.ErrRetryRefused.
func (b *Biller) Retry(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.Charge, error) {
	c, err := charges.Get(ctx, tx, id)
	if err != nil {
		return charges.Charge{}, err
	}
	refuse := func(reason string) (charges.Charge, error) {
		return charges.Charge{}, &charges.TransitionError{From: c.Status, To: charges.Scheduled, Reason: reason}
	}
	switch {
	case c.Status != charges.RequiresReview && c.Status != charges.Failed:
		return refuse("only a charge in requires_review or failed can be retried")
	case c.Resolved:
		return refuse("a person resolved it")
	}
	found, err := b.Gateways.LiveMoney(ctx, c)
	if err != nil {
		return charges.Charge{}, err
	}
	if found != "" {
		return refuse("the gateway shows " + found + ": resolve it instead")
	}
	sub, err := b.Subscriptions.GetForUpdate(ctx, tx, c.SubscriptionID)
	if err != nil {
		return charges.Charge{}, err
	}
	if sub.Status == subscriptions.Cancelled {
		return refuse("the subscription is cancelled")
	}
	next, err := charges.RetryFromReview(ctx, tx, c, sub.PaymentMethod.Gateway, sub.PaymentMethod.Token, b.Clock.Now())
	if errors.Is(err, charges.ErrStale) {
		return refuse("the charge changed meanwhile")
	}
	if err != nil {
		return charges.Charge{}, err
	}
	return next, b.enqueueAuthorize(ctx, tx, []charges.Charge{next})
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
		if sub.CancelAtPeriodEnd {
			// The period that was to be the last has ended (or, before the
			// first anchor, the trial): no later period is charged.
			if err := b.cancelScheduled(ctx, tx, sub); err != nil {
				return 0, nil, err
			}
			continue
		}
		if first := b.firstCaughtUp(sched, from, last, now); first > from {
			skipped := first - from
			metrics.PeriodsSkipped.Add(float64(skipped))
			b.Logger.Warn().Str("subscription_id", sub.ID.String()).Int("skipped_periods", skipped).
				Dur("catch_up_window", b.CatchUpWindow).
				Msg("missed periods older than the catch-up window were skipped, not charged")
			from = first
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

// firstCaughtUp is the first period in [from, last] that catch-up charges:
// the oldest one that began within CatchUpWindow of now, and never later
// than last, the current period.
func (b *Biller) firstCaughtUp(sched period.Schedule, from, last int, now time.Time) int {
	horizon := now.Add(-b.CatchUpWindow)
	for from < last && sched.Start(from).Before(horizon) {
		from++
	}
	return from
}

// cancelScheduled carries out a cancel scheduled at period end: as of the
// end of the current period (the first anchor before billing began).
func (b *Biller) cancelScheduled(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) error {
	if _, _, err := b.Subscriptions.CancelAt(ctx, tx, sub.ID, sub.NextChargeAt, subscriptions.System); err != nil {
		return fmt.Errorf("cancel at period end: %w", err)
	}
	return b.Cancelled(ctx, tx, sub.ID)
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
	Clock         clock.Clock
}

// Lock locks the subscription's row and returns what a charge outcome
// needs of it.
func (o Outcomes) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.Subscription, error) {
	sub, err := o.Subscriptions.GetForUpdate(ctx, tx, id)
	if err != nil {
		return charges.Subscription{}, err
	}
	state := charges.Subscription{Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token,
		Cancelled: sub.Status == subscriptions.Cancelled}
	if sub.Status == subscriptions.Unpaid {
		state.UnpaidSince = sub.UnpaidSince
		if state.UnpaidSince == nil {
			state.UnpaidSince = &sub.UpdatedAt
		}
	}
	return state, nil
}

// ChargePaid returns a past-due or unpaid subscription to active once no
// other charge of it is owed and uncollected. The caller locked the row.
func (o Outcomes) ChargePaid(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	sub, err := o.Subscriptions.Get(ctx, tx, c.SubscriptionID)
	if err != nil {
		return err
	}
	if sub.Status != subscriptions.PastDue && sub.Status != subscriptions.Unpaid {
		return nil
	}
	unpaid, err := charges.HasUnpaid(ctx, tx, c.SubscriptionID, c.ID)
	if err != nil || unpaid {
		return err
	}
	_, _, err = o.Subscriptions.SetStatus(ctx, tx, c.SubscriptionID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
	return err
}

// ChargeDeclined makes an active subscription past due.
func (o Outcomes) ChargeDeclined(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return o.moveFrom(ctx, tx, id, []subscriptions.Status{subscriptions.Active}, subscriptions.PastDue, subscriptions.EventPastDue)
}

// ChargeFailed makes an active or past-due subscription unpaid: no new
// period is charged until the payment method changes. Its dunning ended
// when c's last attempt was due: charges of periods that began since are
// voided (not owed), and its other declined charges stop retrying.
func (o Outcomes) ChargeFailed(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	_, moved, err := o.Subscriptions.MarkUnpaid(ctx, tx, c.SubscriptionID, c.AttemptDueAt)
	if err != nil || !moved {
		return err
	}
	return charges.DunningEnded(ctx, tx, c.SubscriptionID, c.AttemptDueAt, o.Clock.Now())
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
