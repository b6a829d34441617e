package console

import (
	"fmt"
	"html/template"
	"strconv"
	"time"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/subscriptions"
)

// What a page offers follows the object's state: a button the use case
// would refuse is not shown (the use case still decides, and a refusal is
// shown on the page). These are the use cases' rules, read from the
// state machines where they say it.

// subscriptionOffers is what the subscription page offers.
type subscriptionOffers struct {
	Pause, Resume, CancelNow, CancelAtPeriodEnd bool
	// Change: a cancelled subscription's terms no longer matter.
	// RemovePending: only a change that waits can be removed.
	Change, RemovePending bool
	// EndTrial: a trial not set to cancel at its end (ending it would
	// charge a subscription set to end with its trial).
	EndTrial bool
}

func offersFor(s subscriptions.Subscription) subscriptionOffers {
	return subscriptionOffers{
		Pause:             subscriptions.CanTransition(s.Status, subscriptions.Paused),
		Resume:            s.Status == subscriptions.Paused,
		CancelNow:         s.Status != subscriptions.Cancelled,
		CancelAtPeriodEnd: s.Status != subscriptions.Cancelled && !s.CancelAtPeriodEnd,
		Change:            s.Status != subscriptions.Cancelled,
		RemovePending:     s.Status != subscriptions.Cancelled && s.PendingUpdate != nil,
		EndTrial:          s.Status == subscriptions.Trialing && !s.CancelAtPeriodEnd,
	}
}

// nextCharge is when the subscription is next charged, as the API says
// it (next_charge_at): nil while it is not billed (paused, unpaid,
// cancelled), whatever date its schedule keeps.
func nextCharge(s subscriptions.Subscription) *time.Time {
	switch s.Status {
	case subscriptions.Cancelled, subscriptions.Paused, subscriptions.Unpaid:
		return nil
	}
	if s.NextChargeAt.IsZero() {
		return nil
	}
	next := s.NextChargeAt
	return &next
}

// resumeDoes says what the resume of a paused subscription does, and for
// a pause that continues its period, when the next charge then falls.
func resumeDoes(s subscriptions.Subscription) string {
	if s.OnResume != subscriptions.ContinuePeriod || s.PausedTimeLeft == nil {
		return "starts a new period, charged at the resume"
	}
	return "continues the period: the next charge falls " + spanText(*s.PausedTimeLeft) + " after the resume"
}

// spanText writes d in days, hours and minutes (seconds are left out: a
// person reading the page plans in minutes).
func spanText(d time.Duration) string {
	days, rest := d/(24*time.Hour), d%(24*time.Hour)
	return fmt.Sprintf("%d days %d h %d min", days, rest/time.Hour, rest%time.Hour/time.Minute)
}

// billSettled: a bill that is paid (here or elsewhere), withdrawn or
// expired is never charged again, so nothing is offered on it.
func billSettled(b enrollments.Bill) bool {
	switch b.Status {
	case enrollments.BillPaid, enrollments.BillPaidElsewhere, enrollments.BillWithdrawn, enrollments.BillExpired:
		return true
	}
	return false
}

// confirmOffered: only a bill that waits for the customer's consent can
// be confirmed.
func confirmOffered(b enrollments.Bill) bool { return b.Status == enrollments.BillAwaitingConfirmation }

// withdrawOffered: a bill not settled that the bill machine lets move to
// withdrawn.
func withdrawOffered(b enrollments.Bill) bool {
	return !billSettled(b) && enrollments.CanBillTransition(b.Status, enrollments.BillWithdrawn)
}

// paidElsewhere is what was paid against a paid_elsewhere bill outside
// rebill: what its source or the registry last reported, or the bill's
// amount when it reported the bill paid in full without a figure.
func paidElsewhere(b enrollments.Bill) int64 {
	if b.PaidOutside > 0 {
		return b.PaidOutside
	}
	return b.Amount
}

// moneyMayBeLive reports whether the gateway may hold the charge's money
// for its current attempt: a hold was recorded and not released, or a
// call's outcome is unknown. POST /v1/charges/{id}/retry then asks the
// gateway and refuses while it shows a capture or a live hold; the page
// does not offer the retry at all.
func moneyMayBeLive(c charges.Charge) bool {
	if c.HoldReleasedAt != nil {
		return false
	}
	return c.AuthorizationRef != "" || c.UnknownOp != ""
}

// retryOffered: a charge a person may send to the gateway again (the
// API's rule: requires_review or failed, not settled by a person, and no
// money of its current attempt possibly live).
func retryOffered(c charges.Charge) bool {
	return (c.Status == charges.RequiresReview || c.Status == charges.Failed) && !c.Resolved && !moneyMayBeLive(c)
}

// resolveOffered: a charge in review is settled by a person.
func resolveOffered(c charges.Charge) bool { return c.Status == charges.RequiresReview }

// whyInReview says, for people, why the charge waits in the queue: its
// review code and the code's sentence, never the error that led there.
func whyInReview(c charges.Charge) string {
	switch {
	case c.ReviewCode != "" && c.ReviewCode.Sentence() != "":
		return c.ReviewCode.Sentence()
	case c.Status == charges.Unknown && c.UnknownOp != "":
		return "rebill does not know yet whether the gateway did the " + string(c.UnknownOp) + "; it is asking the gateway"
	case c.Status == charges.Unknown:
		return "rebill does not know yet what the gateway did; it is asking the gateway"
	}
	return "no reason was recorded"
}

// lookupFound says, in words, what rebill found when it asked the gateway
// about the charge's current attempt.
func lookupFound(p page, c charges.Charge) template.HTML {
	switch {
	case c.HoldReleasedAt != nil:
		return "No capture: the gateway holds none of this attempt's money (its hold, if any, was released at " +
			p.T(c.HoldReleasedAt) + "). A retry is safe."
	case c.AuthorizationRef != "":
		return "A hold: the gateway holds this attempt's money under reference " + text(c.AuthorizationRef) +
			". It is captured or released by marking the charge, not by a retry."
	case c.UnknownOp != "":
		return template.HTML("Not known yet: rebill is still asking the gateway whether the " +
			template.HTMLEscapeString(string(c.UnknownOp)) + " went through.")
	}
	return "Nothing: no hold or capture of this attempt was recorded."
}

// ms writes a latency in milliseconds, as people compare them (1.8 ms,
// 2001.2 ms), not as Go prints durations.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// gatewayState is what the operations page says of a gateway's health:
// failing when every call in the window failed (its circuit may still be
// closed: the breaker trips on its own counts), degraded when at least
// half did, open when the breaker refuses calls, ok otherwise.
func gatewayState(g fleet.GatewayStatus) healthState {
	h := g.Health
	switch {
	case h.Circuit == "open":
		return healthState{"open", "the circuit is open: rebill sends it no calls for now"}
	case h.Calls > 0 && h.ErrorRate >= 1:
		return healthState{"failing", fmt.Sprintf("every one of its %d calls in the window failed", h.Calls)}
	case h.Calls > 0 && h.ErrorRate >= 0.5:
		return healthState{"degraded", fmt.Sprintf("%s of its %d calls in the window failed", percent(h.ErrorRate), h.Calls)}
	case h.Calls == 0:
		return healthState{"idle", "no calls in the window"}
	}
	return healthState{"ok", ""}
}

// healthState is a gateway's state in a word, and why.
type healthState struct{ State, Why string }

// refundOffer is what the charge page says of a refund: offered on a
// succeeded charge with captured money left, not on a fine (money paid to
// the state goes back through the state's own procedure). Why says why
// not, when not.
type refundOffer struct {
	Offered bool
	Left    int64
	Why     string
}

func refundOfferFor(c charges.Charge) refundOffer {
	left := c.Amount - c.AmountRefunded
	switch {
	case c.Status != charges.Succeeded:
		return refundOffer{}
	case c.RegistryUIN != "":
		return refundOffer{Why: "No refund: this charge paid a fine; money paid to the state is returned through the state's own procedure, not a card refund."}
	case left <= 0:
		return refundOffer{Why: "No refund: the charge has been refunded in full."}
	}
	return refundOffer{Offered: true, Left: left}
}

// refundReasons are the reasons the refund form offers, the API's enum.
func refundReasons() []charges.RefundReason { return charges.RefundReasons }
