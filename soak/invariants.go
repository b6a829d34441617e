package soak

import (
	"fmt"
	"sort"
	"strings"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant    string
	Subscription string
	Charge       string // charge key or id, when the violation is about one
	Detail       string
}

func viol(invariant, sub, charge, detail string) Violation {
	return Violation{Invariant: invariant, Subscription: sub, Charge: charge, Detail: detail}
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Invariant)
	if v.Subscription != "" {
		b.WriteString(" sub=" + v.Subscription)
	}
	if v.Charge != "" {
		b.WriteString(" charge=" + v.Charge)
	}
	b.WriteString(": " + v.Detail)
	return b.String()
}

// Invariant is one named check.
type Invariant struct {
	Name  string
	Check func(*Data) []Violation
}

// Invariants are every check, in the order they are reported.
var Invariants = []Invariant{
	{"at-most-one-capture", AtMostOneCapturePerPeriod},
	{"capture-has-authorization", NoCaptureWithoutAuthorization},
	{"owed-periods-settled", OwedPeriodsSettled},
	{"no-capture-after-cancel", NoCaptureAfterCancel},
	{"no-dangling-holds", NoDanglingHolds},
	{"current-card", OperationsUseCurrentCard},
	{"events-match-transitions", EventsMatchTransitions},
	{"no-charge-left-open", NoChargeLeftOpen},
	{"ledger-agrees", LedgerAgreesWithCharges},
	{"status-agrees", StatusAgreesWithCharges},
	{PaidElsewhereUnpaid, PaidElsewhereNotPaidByRebill},
	{FineNotOverpaid, FineNotOverpaidByRebill},
	{PaidBeforeHold, FinePaidBeforeHoldNotCaptured},
	{UnpostedHoldReleased, FineHoldNotLeftUnposted},
	{"slot-outlives-attempt", NoSlotOutlivesItsAttempt},
	{RefundsWithinCapture, RefundsWithinCaptureOnLedger},
	{RefundOnceAtGateway, RefundKeyOnceOnLedger},
	{RefundAtGateway, EverySucceededRefundAtGateway},
	{NoRefundOfFine, NoRefundOfAFine},
	{ZhkhReportedOnce, HousingReportedOnce},
	{ZhkhRefundAnnulled, HousingRefundAnnulled},
	{ZhkhNoReportNoCapture, HousingNoReportWithoutCapture},
	{ZhkhDocumentPaidOnce, HousingDocumentPaidOnce},
	{PricesInForce, PeriodsChargedAtThePriceInForce},
	{AdjustmentsExact, AdjustmentsMatchTheirChanges},
	{CreditsWithinCaptured, CreditsNeverBeyondWhatWasCaptured},
}

// CheckAll runs every invariant and returns their violations.
func CheckAll(d *Data) []Violation {
	var out []Violation
	for _, inv := range Invariants {
		out = append(out, inv.Check(d)...)
	}
	return out
}

// Coverage counts what the invariants judged.
type Coverage struct {
	Subscriptions, Events, Charges, LedgerOps, Captures int
	// Refunds are rebill's refunds judged; LedgerRefunds the succeeded
	// refunds the gateways recorded.
	Refunds, LedgerRefunds                     int
	OwedPeriods, NotOwedPeriods, UnsurePeriods int
	CardChanges, Cancels                       int
	// Changes are the changes of terms judged (applied ones among them),
	// Adjustments their adjustment charges, Credits the credits granted;
	// Trials the subscriptions created with a trial and ContinuedPauses
	// the pauses that kept their paid time.
	Changes, AppliedChanges, Adjustments, Credits int
	Trials, ContinuedPauses                       int
}

// Measure counts what d gives the invariants to judge.
func Measure(d *Data) Coverage {
	var c Coverage
	c.Subscriptions = len(d.Subscriptions)
	c.LedgerOps = len(d.Ledger)
	for _, o := range d.Ledger {
		if o.Op == "capture" && o.Status == "succeeded" {
			c.Captures++
		}
		if o.Op == "refund" && o.Status == "succeeded" {
			c.LedgerRefunds++
		}
	}
	c.Refunds = len(d.Refunds)
	var moves []ClockMove
	if d.Observed != nil {
		moves = d.Observed.ClockMoves
	}
	for _, s := range d.Subscriptions {
		c.Events += len(s.Events)
		c.Charges += len(s.Charges)
		c.Changes += len(s.Changes)
		c.AppliedChanges += len(appliedChanges(s.Changes))
		for _, ch := range s.Charges {
			if ch.Adjustment() {
				c.Adjustments++
			}
		}
		for _, cr := range s.Credits {
			if cr.Amount > 0 {
				c.Credits++
			}
		}
		if len(s.Events) > 0 && s.Events[0].To == "trialing" {
			c.Trials++
		}
		obs := observed(d, s.ID)
		if obs != nil {
			for _, p := range obs.Pauses {
				if p.OnResume == "continue_period" {
					c.ContinuedPauses++
				}
			}
		}
		if obs != nil && len(obs.Cards) > 0 {
			c.CardChanges += len(obs.Cards) - 1
			c.Cancels += len(obs.Cancels)
		}
		for _, p := range BuildTimeline(s, obs, moves).Periods(d.Now, moves) {
			switch p.Owed {
			case IsOwed:
				c.OwedPeriods++
			case NotOwed:
				c.NotOwedPeriods++
			default:
				c.UnsurePeriods++
			}
		}
	}
	return c
}

// ledger indexes the gateways' operations.
type ledger struct {
	byCharge map[string][]LedgerOp // charge key -> operations, in ledger order
}

func indexLedger(ops []LedgerOp) ledger {
	l := ledger{byCharge: map[string][]LedgerOp{}}
	for _, o := range ops {
		if k := o.ChargeKey(); k != "" {
			l.byCharge[k] = append(l.byCharge[k], o)
		}
	}
	for _, os := range l.byCharge {
		sort.SliceStable(os, func(i, j int) bool { return os[i].At.Before(os[j].At) })
	}
	return l
}

// captures are a charge's succeeded captures.
func (l ledger) captures(chargeKey string) []LedgerOp {
	var out []LedgerOp
	for _, o := range l.byCharge[chargeKey] {
		if o.Op == "capture" && o.Status == "succeeded" {
			out = append(out, o)
		}
	}
	return out
}

// attemptOps are a charge's operations of one attempt.
func (l ledger) attemptOps(chargeKey string, attempt int) []LedgerOp {
	var out []LedgerOp
	for _, o := range l.byCharge[chargeKey] {
		if o.Attempt() == attempt {
			out = append(out, o)
		}
	}
	return out
}

func chargesByKey(d *Data) map[string]*Charge {
	out := map[string]*Charge{}
	for i := range d.Subscriptions {
		for j := range d.Subscriptions[i].Charges {
			c := &d.Subscriptions[i].Charges[j]
			out[c.Key] = c
		}
	}
	return out
}

func subOfKey(chargeKey string) string {
	if i := strings.IndexByte(chargeKey, ':'); i > 0 {
		return chargeKey[:i]
	}
	return chargeKey
}

func describeOps(ops []LedgerOp) string {
	parts := make([]string, len(ops))
	for i, o := range ops {
		parts[i] = fmt.Sprintf("%s a%d %s %s last4=%s at %s", o.Gateway, o.Attempt(), o.Op, o.Status, o.TokenLast4,
			o.At.Format("15:04:05.000"))
	}
	return strings.Join(parts, "; ")
}

func sortViolations(vs []Violation) {
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Subscription != vs[j].Subscription {
			return vs[i].Subscription < vs[j].Subscription
		}
		return vs[i].Charge < vs[j].Charge
	})
}

// sameDayPeriod reports whether an earlier period holds p's key, paid by
// a charge or by credit alone: p began on the calendar day (in the
// subscription's zone) another period began, which happens when a resume
// starts a period on such a day. A period's key is its start's date, so p
// is that period (decision 5), and the earlier one's payment is judged
// for both.
func sameDayPeriod(s Subscription, p Period) bool {
	for _, c := range s.Charges {
		// A key after an interval change ends in that change's suffix.
		if !c.Adjustment() && strings.HasPrefix(c.PeriodKey, p.Key) && c.PeriodStart.Before(p.Start) {
			return true
		}
	}
	for _, cr := range s.Credits {
		if cr.Amount < 0 && cr.PeriodStart != nil && strings.HasPrefix(cr.PeriodKey, p.Key) && cr.PeriodStart.Before(p.Start) {
			return true
		}
	}
	return false
}

// Names of the checks of fines paid outside rebill.
const (
	PaidElsewhereUnpaid  = "paid-elsewhere-not-paid-by-rebill"
	FineNotOverpaid      = "fine-not-overpaid-by-rebill"
	PaidBeforeHold       = "fine-paid-before-hold-not-captured"
	UnpostedHoldReleased = "fine-hold-not-left-unposted"
)
