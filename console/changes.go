package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/usecases"
)

// intervals are the intervals the Change form offers, in the order a
// person reads them.
var intervals = []period.Interval{period.Day, period.Week, period.Month, period.Quarter, period.Year}

// prorations are the choices of the Change form's proration, with what
// each does; the empty one leaves the choice to the configured default.
var prorations = []outcome{
	{"", "the configured default"},
	{string(subscriptions.ProrationNone), "none: the new price from the next period"},
	{string(subscriptions.ProrationChargeNow), "charge_now: charge an upgrade's unused difference now"},
	{string(subscriptions.ProrationCreditNext), "credit_next: credit a downgrade's unused difference to the next charges"},
}

// changeSubscription changes the plan through the same use case as the
// API's POST /v1/subscriptions/{id}/update: what the form leaves empty
// stays as it is. A refusal (the subscription's state, a receipt that no
// longer adds up, a change racing another) is shown on the page.
func (h *Handler) changeSubscription(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	sub, err := h.opts.Billing.Subscription(r.Context(), s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	u, err := changeForm(r, sub.Currency)
	if err != nil {
		h.refuse(w, r, consolePath("subscriptions", id.String()), err)
		return
	}
	name := "subscription.update"
	if u.Effective == subscriptions.EffectivePeriodEnd {
		name = "subscription.update_at_period_end"
	}
	h.subscriptionAction(w, r, name, func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.UpdateSubscription(ctx, tx, c, id, u)
		if err != nil {
			return "", err
		}
		if p := sub.PendingUpdate; u.Effective == subscriptions.EffectivePeriodEnd && p != nil {
			return "Change scheduled for " + p.EffectiveAt.UTC().Format("2006-01-02 15:04 UTC") + ": " + pendingChange(sub) + ".", nil
		}
		return fmt.Sprintf("Changed now: %s every %d %s.", money(sub.Amount, sub.Currency), sub.IntervalCount, sub.Interval), nil
	})
}

// changeForm reads the Change form as the update it asks for. Returns
// errInput naming the field that is wrong.
func changeForm(r *http.Request, currency string) (subscriptions.Update, error) {
	u := subscriptions.Update{Effective: subscriptions.EffectiveNow}
	if text := strings.TrimSpace(r.PostFormValue("amount")); text != "" {
		amount, err := minorUnits(text, currency, "the current amount")
		if err != nil {
			return u, err
		}
		u.Amount = &amount
	}
	if v := r.PostFormValue("interval"); v != "" {
		iv, err := period.ParseInterval(v)
		if err != nil {
			return u, fmt.Errorf("%w: interval must be day, week, month, quarter or year, or empty for the current one", errInput)
		}
		u.Interval = &iv
	}
	if v := strings.TrimSpace(r.PostFormValue("interval_count")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 365 {
			return u, fmt.Errorf("%w: intervals per period must be a whole number from 1 to 365, or empty for the current one", errInput)
		}
		u.IntervalCount = &n
	}
	switch e := subscriptions.Effective(r.PostFormValue("effective")); e {
	case subscriptions.EffectiveNow, subscriptions.EffectivePeriodEnd:
		u.Effective = e
	default:
		return u, fmt.Errorf("%w: when must be now or at the period's end", errInput)
	}
	switch p := subscriptions.Proration(r.PostFormValue("proration")); p {
	case "":
	case subscriptions.ProrationNone, subscriptions.ProrationChargeNow, subscriptions.ProrationCreditNext:
		if u.Effective == subscriptions.EffectivePeriodEnd {
			return u, fmt.Errorf("%w: proration applies only to a change made now: a change at the period's end leaves nothing unused to prorate", errInput)
		}
		u.Proration = p
	default:
		return u, fmt.Errorf("%w: proration must be none, charge_now or credit_next, or empty for the configured default", errInput)
	}
	if u.Amount == nil && u.Interval == nil && u.IntervalCount == nil {
		return u, fmt.Errorf("%w: nothing to change: give a new amount, interval or intervals per period", errInput)
	}
	return u, nil
}

// removePendingChange removes the change waiting for the period's end;
// with none waiting it changes nothing, as the API's removal.
func (h *Handler) removePendingChange(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	h.subscriptionAction(w, r, "subscription.remove_pending_update", func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.RemovePendingUpdate(ctx, tx, c, id)
		return fmt.Sprintf("Pending change removed: the next period keeps %s every %d %s.", money(sub.Amount, sub.Currency),
			sub.IntervalCount, sub.Interval), err
	})
}

// pendingChange says what the subscription's pending update changes,
// from what to what; a changed description, metadata or receipt is named,
// not quoted (the page shows the current ones).
func pendingChange(s subscriptions.Subscription) string {
	p := s.PendingUpdate
	if p == nil {
		return ""
	}
	var parts []string
	if p.Amount != nil {
		parts = append(parts, "amount "+money(s.Amount, s.Currency)+" → "+money(*p.Amount, s.Currency))
	}
	if p.Interval != nil || p.IntervalCount != nil {
		iv, n := s.Interval, s.IntervalCount
		if p.Interval != nil {
			iv = *p.Interval
		}
		if p.IntervalCount != nil {
			n = *p.IntervalCount
		}
		parts = append(parts, fmt.Sprintf("every %d %s → every %d %s", s.IntervalCount, s.Interval, n, iv))
	}
	if p.Description != nil {
		parts = append(parts, "new description")
	}
	if p.Metadata != nil {
		parts = append(parts, "new metadata")
	}
	if p.Receipt != nil {
		parts = append(parts, "new receipt")
	}
	if len(parts) == 0 {
		return "no change of terms"
	}
	return strings.Join(parts, "; ")
}
