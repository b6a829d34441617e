package renewals

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/subscriptions"
)

// Update changes the subscription's terms in tx (subscriptions.Store.Update
// says how) and creates what the change charges: a scheduled resume whose
// time came is carried out, and the periods begun before the change that
// no scan reached are charged first, at the terms in force at their start; a proration's upgrade gets its adjustment charge; the
// new period an interval change starts is charged at once, its credit
// used. Returns the errors of subscriptions.Store.Update.
func (r *Renewals) Update(ctx context.Context, tx pgx.Tx, id uuid.UUID, u subscriptions.Update, pr subscriptions.Proration,
	actor subscriptions.Actor) (subscriptions.Subscription, subscriptions.Change, error) {
	sub, err := r.Subscriptions.GetForUpdate(ctx, tx, id)
	if err != nil {
		return subscriptions.Subscription{}, subscriptions.Change{}, err
	}
	if sub.Status == subscriptions.Paused && sub.ResumeAt != nil && !sub.ResumeAt.After(r.Clock.Now()) {
		// The pause ended at its resume_at, which no scan carried out yet:
		// the period it began was in force before this change.
		if sub, _, err = r.Subscriptions.ResumeAt(ctx, tx, id, *sub.ResumeAt, subscriptions.System); err != nil {
			return subscriptions.Subscription{}, subscriptions.Change{}, err
		}
	}
	if _, err := r.Due(ctx, tx, sub); err != nil {
		return subscriptions.Subscription{}, subscriptions.Change{}, err
	}
	sub, ch, err := r.Subscriptions.Update(ctx, tx, id, u, pr, actor, periodPaid)
	if err != nil {
		return sub, subscriptions.Change{}, err
	}
	if ch.Adjustment > 0 {
		if err := r.adjust(ctx, tx, sub, ch); err != nil {
			return subscriptions.Subscription{}, subscriptions.Change{}, err
		}
	}
	if ch.Restarted {
		if sub, err = r.Due(ctx, tx, sub); err != nil {
			return subscriptions.Subscription{}, subscriptions.Change{}, err
		}
	}
	return sub, ch, nil
}

// periodPaid is what charges knows of a period's charges, for a change's
// proration (subscriptions.PeriodPaid).
func periodPaid(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, periodKey string) (int64, bool, error) {
	p, err := charges.PaidForPeriod(ctx, tx, subscriptionID, periodKey)
	return p.Captured, p.InFlight, err
}

// adjust creates the adjustment charge of change ch: a charge like any
// other (the one Create verb, its own authorize job, dunning, review,
// webhooks), of the prorated difference, keyed by the period and the
// change so that it exists once, with the subscription's card and
// experiment arms, and its receipt's first item re-priced to it. Its
// period start is the prorated period's: a cancel or the end of dunning
// treats it as that period's charge.
func (r *Renewals) adjust(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription, ch subscriptions.Change) error {
	var receipt []byte
	if sub.Receipt != nil {
		var err error
		if receipt, err = json.Marshal(sub.Receipt.Repriced(ch.Adjustment)); err != nil {
			return fmt.Errorf("encode receipt of adjustment %s: %w", ch.ID, err)
		}
	}
	now := r.Clock.Now()
	created, err := r.Charges.Create(ctx, tx, []charges.New{{SubscriptionID: sub.ID, CustomerID: sub.CustomerID,
		PeriodKey: charges.AdjustmentKey(ch.Period.Key, ch.ID), PeriodStart: ch.Period.Start, Amount: ch.Adjustment,
		Currency: sub.Currency, Gateway: sub.PaymentMethod.Gateway, Token: sub.PaymentMethod.Token, Receipt: receipt,
		Experiments: sub.Experiments}}, now)
	if err != nil {
		return fmt.Errorf("create adjustment charge of change %s: %w", ch.ID, err)
	}
	metrics.ChargeTransitions.WithLabelValues(string(charges.Scheduled)).Add(float64(len(created)))
	return nil
}
