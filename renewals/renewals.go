package renewals

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/subscriptions"
)

// Renewals creates charges for due periods and tells subscriptions about
// their charges' outcomes.
type Renewals struct {
	Pool          *pgxpool.Pool
	Subscriptions *subscriptions.Store
	Clock         clock.Clock
	// Charges writes the charges' moves, publishes their events and
	// enqueues their jobs.
	Charges *charges.Store
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
	// HoldCheckRetryAfter spaces the runs of a hold check that River keeps
	// discarding (a crash on every attempt) while its hold is not released:
	// the scan has it run again once it has been discarded this long.
	HoldCheckRetryAfter time.Duration
	Logger              zerolog.Logger
	// Notices publishes the customer notices due at the scan's now (notify
	// implements it); nil sends none.
	Notices Notifier
	// Experiments assigns subscriptions to the arms of running
	// experiments as their charges are created; nil runs none.
	Experiments *experiments.Set
	// Dunning is the default dunning schedule, which subscriptions in no
	// dunning arm follow.
	Dunning charges.Dunning
}

// Notifier publishes the customer notices due at now, each once however
// often it is called, and returns how many it published.
type Notifier interface {
	SendNotices(ctx context.Context, now time.Time) (int, error)
}

// Create creates the subscription n describes, in tx, charged for the
// periods due at once (the first one, unless the billing anchor is in the
// future or a trial comes first): it is inserted already advanced past
// them, their charges are written in the same round trip, and their
// authorize jobs are enqueued.
// The periods are those due at the subscription's creation time.
func (r *Renewals) Create(ctx context.Context, tx pgx.Tx, n subscriptions.New, actor subscriptions.Actor) (subscriptions.Subscription, error) {
	var created []charges.Charge
	sub, err := r.Subscriptions.Create(ctx, tx, n, actor,
		func(sub subscriptions.Subscription) (*subscriptions.Advance, subscriptions.SendWith, error) {
			if sub.Status == subscriptions.Trialing {
				return nil, nil, nil // nothing is charged before the trial ends
			}
			now := sub.CreatedAt
			sched := sub.Schedule()
			last := sched.IndexAt(now)
			if last < sub.NextPeriodIndex {
				return nil, nil, nil
			}
			var due dueCharges
			var credit int64 // a new subscription has none, nor a period paid
			adv, err := r.periodsDue(ctx, &due, sub, sched, sub.NextPeriodIndex, last, now, &credit, "",
				append(renewalPolicies, experiments.PolicyRouting)...)
			if err != nil {
				return nil, nil, err
			}
			return &adv, func(ctx context.Context, tx pgx.Tx, batch *pgx.Batch) (err error) {
				created, err = r.Charges.CreateBatched(ctx, tx, batch, due.news, now)
				return err
			}, nil
		})
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	metrics.PeriodsEnqueued.Add(float64(len(created)))
	metrics.ChargeTransitions.WithLabelValues(string(charges.Scheduled)).Add(float64(len(created)))
	return sub, nil
}

// Due charges every period of sub that is due now, in tx: the API calls it
// after resuming a subscription, and before pausing or cancelling one, so
// that a period due at once is enqueued in the same transaction. A trial
// whose end has come, which the scan has not reached yet, ends first, as
// the scan would end it. Returns the updated subscription.
func (r *Renewals) Due(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) (subscriptions.Subscription, error) {
	now := r.Clock.Now()
	if sub.Status == subscriptions.Trialing && !sub.NextChargeAt.After(now) {
		var err error
		if sub, err = r.endTrial(ctx, tx, sub); err != nil {
			return subscriptions.Subscription{}, err
		}
	}
	if sub.NextChargeAt.After(now) || (sub.Status != subscriptions.Active && sub.Status != subscriptions.PastDue) {
		return sub, nil
	}
	_, advanced, err := r.charge(ctx, tx, []subscriptions.Subscription{sub}, now)
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	if len(advanced) != 1 {
		return r.Subscriptions.Get(ctx, tx, sub.ID) // cancelled at period end instead
	}
	if sub.PendingUpdate != nil || sub.CreditBalance > 0 {
		// Its pending update applied, or its credit used: the row says how.
		if sub, err = r.Subscriptions.Get(ctx, tx, sub.ID); err != nil {
			return subscriptions.Subscription{}, err
		}
		return sub, r.Subscriptions.Stored(ctx, tx, sub)
	}
	// What the advance wrote, without reading the row back. An event this
	// transaction wrote of sub before the advance (a resume's) shows it.
	sub.NextPeriodIndex, sub.NextChargeAt, sub.UpdatedAt = advanced[0].NextPeriodIndex, advanced[0].NextChargeAt, now
	return sub, r.Subscriptions.Stored(ctx, tx, sub)
}

// endTrial ends the locked trialing sub as of its end, which has come: it
// becomes active, its first period beginning at the trial's end. A trial
// with a cancel scheduled at its end is cancelled then instead, nothing
// charged.
func (r *Renewals) endTrial(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) (subscriptions.Subscription, error) {
	if sub.CancelAtPeriodEnd {
		if err := r.cancelScheduled(ctx, tx, sub); err != nil {
			return subscriptions.Subscription{}, err
		}
		return r.Subscriptions.Get(ctx, tx, sub.ID)
	}
	ended, _, err := r.Subscriptions.EndTrial(ctx, tx, sub.ID, *sub.TrialEnd, subscriptions.System)
	if err != nil {
		return subscriptions.Subscription{}, fmt.Errorf("end the trial of subscription %s: %w", sub.ID, err)
	}
	return ended, nil
}

// dueBefore charges, in tx, the periods of the locked subscription sub that
// began before until and that no scan has reached: an active or past-due
// subscription's periods, up to the end of its dunning.
func (r *Renewals) dueBefore(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, until time.Time) error {
	if !sub.NextChargeAt.Before(until) || (sub.Status != subscriptions.Active && sub.Status != subscriptions.PastDue) {
		return nil
	}
	_, _, err := r.chargeUpTo(ctx, tx, []subscriptions.Subscription{sub}, until.Add(-time.Nanosecond), r.Clock.Now())
	return err
}

// Cancelled stops the cancelled subscription's charges: unstarted ones are
// voided, held money is released by void jobs, and nothing is captured.
func (r *Renewals) Cancelled(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID) error {
	return r.Charges.StopSubscription(ctx, tx, subscriptionID, r.Clock.Now())
}
