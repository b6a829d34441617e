package renewals

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/subscriptions"
)

// Outcomes moves subscriptions as their charges settle: the port of
// subscriptions as owners of charges (charges.Owner).
type Outcomes struct {
	Subscriptions *subscriptions.Store
	// Renewals charges the periods that began before a subscription's
	// dunning ended, when it ends (nil: they are not, as in tests of
	// other matters).
	Renewals *Renewals
}

// Lock locks the subscription's row and returns what a charge outcome
// needs of it.
func (o Outcomes) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.OwnerState, error) {
	sub, err := o.Subscriptions.GetForUpdate(ctx, tx, id)
	if err != nil {
		return charges.OwnerState{}, err
	}
	return o.outcomeState(sub), nil
}

// LockMany is Lock for many subscriptions in one statement, their rows
// locked in the order of their ids.
func (o Outcomes) LockMany(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]charges.OwnerState, error) {
	subs, err := o.Subscriptions.GetManyForUpdate(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]charges.OwnerState, len(subs))
	for _, sub := range subs {
		out[sub.ID] = o.outcomeState(sub)
	}
	return out, nil
}

// outcomeState is what a charge outcome needs of sub.
func (o Outcomes) outcomeState(sub subscriptions.Subscription) charges.OwnerState {
	state := charges.OwnerState{Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token,
		Cancelled: sub.Status == subscriptions.Cancelled,
		// What ChargePaid would find: only a past-due or unpaid
		// subscription is moved by a paid charge.
		PaidChangesNothing: sub.Status != subscriptions.PastDue && sub.Status != subscriptions.Unpaid}
	if sub.Status == subscriptions.Unpaid {
		state.UnpaidSince = sub.UnpaidSince
		if state.UnpaidSince == nil {
			state.UnpaidSince = &sub.UpdatedAt
		}
	}
	if o.Renewals != nil && o.Renewals.Experiments != nil {
		state.NextAttempt = o.dunning(sub)
	}
	return state
}

// dunning is the schedule of sub's charges: the dunning arm that governs
// a charge at the decision (its record's, while its experiment runs), or
// the default schedule (nil from the returned function's ok: the
// pipeline's).
func (o Outcomes) dunning(sub subscriptions.Subscription) func(c charges.Charge, first time.Time) (time.Time, bool) {
	exps, clk, def := o.Renewals.Experiments, o.Renewals.Clock, o.Renewals.Dunning
	return func(c charges.Charge, first time.Time) (time.Time, bool) {
		_, arm, ok := exps.Governing(experiments.PolicyDunning, c.Experiments(), clk.Now())
		if !ok {
			return def.NextAttempt(first, c.AttemptCount)
		}
		return arm.Params.NextRetry(first, c.AttemptCount, sub.Schedule().Location)
	}
}

// ChargePaid returns a past-due or unpaid subscription to active once it
// owes nothing more; an unpaid one goes on after the periods that began
// while it was unpaid, which are not owed (returned: when its dunning
// ended). The caller locked the row.
func (o Outcomes) ChargePaid(ctx context.Context, tx pgx.Tx, c charges.Charge, owesMore bool) (*time.Time, error) {
	sub, err := o.Subscriptions.Get(ctx, tx, c.SubscriptionID)
	if err != nil {
		return nil, err
	}
	if owesMore || (sub.Status != subscriptions.PastDue && sub.Status != subscriptions.Unpaid) {
		return nil, nil
	}
	if sub.Status == subscriptions.Unpaid {
		_, _, err = o.Subscriptions.ReactivateUnpaid(ctx, tx, c.SubscriptionID)
		return sub.UnpaidSince, err
	}
	_, _, err = o.Subscriptions.SetStatus(ctx, tx, c.SubscriptionID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
	return nil, err
}

// ChargeDeclined makes an active subscription past due.
func (o Outcomes) ChargeDeclined(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return o.moveFrom(ctx, tx, id, []subscriptions.Status{subscriptions.Active}, subscriptions.PastDue, subscriptions.EventPastDue)
}

// ChargeFailed makes an active or past-due subscription unpaid: no new
// period is charged until the payment method changes. Its dunning ended
// when c's last attempt was due (see DunningEnd), which it returns: the
// charges of periods that began since are not owed, and its other
// declined charges stop retrying.
func (o Outcomes) ChargeFailed(ctx context.Context, tx pgx.Tx, c charges.Charge) (*time.Time, error) {
	end := DunningEnd(c)
	if o.Renewals != nil {
		// Periods that began before the end of dunning are owed; those the
		// scan had not reached yet (it ran late, or the clock jumped) are
		// charged now: nothing charges an unpaid subscription, and leaving
		// unpaid skips every period that has begun.
		sub, err := o.Subscriptions.GetForUpdate(ctx, tx, c.SubscriptionID)
		if err != nil {
			return nil, err
		}
		if err := o.Renewals.dueBefore(ctx, tx, sub, end); err != nil {
			return nil, err
		}
	}
	_, moved, err := o.Subscriptions.MarkUnpaid(ctx, tx, c.SubscriptionID, end)
	if err != nil || !moved {
		return nil, err
	}
	return &end, nil
}

// DunningEnd is when the dunning that failed charge c ended: when its last
// attempt was due, but always after its own period began. A first attempt
// is due at its period's start (a subscription anchored at its creation,
// a scan on time), and the periods that begin at or after the end of
// dunning are not owed: ending it at that same instant would disown the
// very period c was collecting, and a support retry or a card change would
// then void it unpaid. Such a dunning ends one microsecond, PostgreSQL's
// resolution, after the period began. A later period that began at the
// moment a retry failed for good is still not owed.
func DunningEnd(c charges.Charge) time.Time {
	if c.AttemptDueAt.After(c.PeriodStart) {
		return c.AttemptDueAt
	}
	return c.PeriodStart.Add(time.Microsecond)
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
