package soak

// The invariants judged on small hand-made records: each must pass a
// correct record and catch the defect it exists for (a checker that
// never fires proves nothing).

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2027, 1, 10, 9, 0, 0, 0, time.UTC)

const subID = "00000000-0000-7000-8000-000000000001"

func day(n float64) time.Time { return t0.Add(time.Duration(n * 24 * float64(time.Hour))) }

func rt(ms int) time.Time {
	return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// record builds a monthly UTC subscription created at t0 with its first
// anchor at t0, whose events are given after the created one.
type record struct {
	d   *Data
	sub *Subscription
	obs *ObservedSubscription
}

func newRecord(now time.Time) *record {
	r := &record{d: &Data{Now: now, Observed: &Observations{Subscriptions: map[string]*ObservedSubscription{}}}}
	r.d.Subscriptions = []Subscription{{ID: subID, Status: "active", Amount: 500, Currency: "USD", Interval: "month",
		IntervalCount: 1, TimeZone: "UTC", BillingAnchor: t0, CreatedAt: t0,
		Events: []Event{{ID: 1, Type: "created", To: "active", ActorRole: "admin", At: t0}}}}
	r.sub = &r.d.Subscriptions[0]
	r.obs = &ObservedSubscription{Created: Interval{rt(0), rt(10)}, Anchor: t0,
		Cards: []ObservedCard{{Gateway: "sim1", Token: "tok_ok_0001", Last4: "0001", Good: true, When: Interval{rt(0), rt(10)}}}}
	r.d.Observed.Subscriptions[subID] = r.obs
	return r
}

func (r *record) event(typ, from, to string, at time.Time, system bool) {
	role := "admin"
	if system {
		role = "system"
	}
	r.sub.Events = append(r.sub.Events, Event{ID: int64(len(r.sub.Events) + 1), Type: typ, From: from, To: to, ActorRole: role, At: at})
	if from != to {
		r.sub.Status = to
	}
}

// paid adds a succeeded charge for the period starting at start, with its
// authorize and capture at the gateway (real time ms, card last4).
func (r *record) paid(start time.Time, ms int, last4 string) *Charge {
	c := r.charge(start, "succeeded", 1)
	r.op(c, 1, "authorize", "succeeded", ms, last4)
	r.op(c, 1, "capture", "succeeded", ms+5, last4)
	return c
}

func (r *record) charge(start time.Time, status string, attempts int) *Charge {
	key := subID + ":" + start.Format("2006-01-02")
	r.sub.Charges = append(r.sub.Charges, Charge{ID: key, SubscriptionID: subID, PeriodKey: start.Format("2006-01-02"),
		PeriodStart: start, Key: key, Amount: 500, Currency: "USD", Gateway: "sim1", Status: status, AttemptCount: attempts})
	return &r.sub.Charges[len(r.sub.Charges)-1]
}

func (r *record) op(c *Charge, attempt int, op, status string, ms int, last4 string) {
	r.d.Ledger = append(r.d.Ledger, LedgerOp{Gateway: "sim1", Op: op, IdempotencyKey: c.Key + ":a" + itoa(attempt) + ":" + op,
		Reference: "ref-" + c.Key + op, TokenLast4: last4, Amount: 500, Currency: "USD", Status: status, At: rt(ms)})
}

func itoa(n int) string { return strconv.Itoa(n) }

func expect(t *testing.T, got []Violation, want ...string) {
	t.Helper()
	if len(want) == 0 {
		for _, v := range got {
			t.Errorf("unexpected violation: %s", v)
		}
		return
	}
	for _, w := range want {
		found := false
		for _, v := range got {
			found = found || strings.Contains(v.String(), w)
		}
		if !found {
			t.Errorf("no violation mentioning %q; got %v", w, got)
		}
	}
}

func TestGridClampsMonthEndsAndKeepsLocalTime(t *testing.T) {
	g, err := NewGrid(time.Date(2027, 1, 31, 10, 0, 0, 0, time.UTC), "UTC", "month", 1)
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range []string{"2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30"} {
		if got := g.Start(n).Format("2006-01-02"); got != want {
			t.Errorf("period %d starts %s, want %s", n, got, want)
		}
	}
	ny, _ := time.LoadLocation("America/New_York")
	g, _ = NewGrid(time.Date(2027, 3, 13, 9, 0, 0, 0, ny), "America/New_York", "day", 1)
	if got := g.Start(1).In(ny).Hour(); got != 9 {
		t.Errorf("the day after DST starts at %d:00 local, want 9:00", got)
	}
	g, _ = NewGrid(time.Date(2027, 11, 30, 0, 0, 0, 0, time.UTC), "UTC", "quarter", 1)
	if got := g.Start(1).Format("2006-01-02"); got != "2028-02-29" {
		t.Errorf("a quarter after Nov 30 is %s, want 2028-02-29", got)
	}
}

func TestOwedPeriodsPaidOnce(t *testing.T) {
	r := newRecord(day(40))
	r.paid(t0, 20, "0001")
	r.paid(t0.AddDate(0, 1, 0), 500, "0001")
	expect(t, CheckAll(r.d))
}

func TestOwedPeriodNeverCharged(t *testing.T) {
	r := newRecord(day(40))
	r.paid(t0, 20, "0001")
	expect(t, OwedPeriodsSettled(r.d), "never charged")
}

func TestPausedPeriodIsNotOwed(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", day(10), false)
	r.event("resumed", "paused", "active", day(50), false)
	r.obs.Resumes = []ObservedResume{{When: Interval{rt(900), rt(910)}, BillingAnchor: day(50)}}
	r.sub.BillingAnchor = day(50)
	r.paid(day(50), 950, "0001")
	expect(t, CheckAll(r.d)) // Feb 10 began while paused: not owed, not charged
	r.paid(t0.AddDate(0, 1, 0), 990, "0001")
	expect(t, OwedPeriodsSettled(r.d), "began while paused, not owed): captured 1 times")
}

func TestResumeThatKeepsTheAnchorIsAnError(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", day(10), false)
	r.event("resumed", "paused", "active", day(50), false)
	r.obs.Resumes = []ObservedResume{{When: Interval{rt(900), rt(910)}, BillingAnchor: t0}} // the anchor did not move
	expect(t, OwedPeriodsSettled(r.d), "no resume answer shows the anchor moved")
}

func TestResumeOnTheDayOfAChargedPeriodIsThatPeriod(t *testing.T) {
	r := newRecord(day(5))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", t0.Add(time.Hour), false)
	r.event("resumed", "paused", "active", t0.Add(3*time.Hour), false)
	r.obs.Resumes = []ObservedResume{{When: Interval{rt(900), rt(910)}, BillingAnchor: t0.Add(3 * time.Hour)}}
	r.sub.BillingAnchor = t0.Add(3 * time.Hour)
	expect(t, CheckAll(r.d)) // its key 2027-01-10 is the paid period's: one payment
}

func TestUnpaidPeriodsAreNotOwed(t *testing.T) {
	r := newRecord(day(70))
	c := r.charge(t0, "failed", 1)
	r.op(c, 1, "authorize", "declined", 20, "0001")
	r.event("unpaid", "active", "unpaid", t0, true)
	r.obs.UnpaidSince = []time.Time{t0}
	expect(t, CheckAll(r.d))
	r.paid(t0.AddDate(0, 1, 0), 900, "0001")
	expect(t, OwedPeriodsSettled(r.d), "began while unpaid, not owed): captured")
}

func TestUnpaidWithoutSampleIsUnsure(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 20, "0001")
	c := r.charge(t0.AddDate(0, 1, 0), "failed", 5)
	r.op(c, 5, "authorize", "declined", 900, "0001")
	r.event("past_due", "active", "past_due", t0.AddDate(0, 1, 0), true)
	r.event("unpaid", "past_due", "unpaid", day(69), true) // dunning ended some time before
	r.paid(t0.AddDate(0, 2, 0), 990, "0001")               // Mar 10: began after the past_due, before the unpaid was logged
	periods := BuildTimeline(*r.sub, r.obs, nil).Periods(r.d.Now, nil)
	if periods[2].Owed != Unsure {
		t.Errorf("Mar 10 is %s, want unsure", periods[2].Owed)
	}
}

func TestCancelAtPeriodEnd(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 20, "0001")
	r.event("cancel_scheduled", "active", "active", day(3), false)
	end := t0.AddDate(0, 1, 0)
	r.event("cancelled", "active", "cancelled", day(60), true)
	r.sub.CancelledAt = &end
	expect(t, CheckAll(r.d))
	r.paid(end, 900, "0001")
	expect(t, CheckAll(r.d), "not owed): captured", "no-capture-after-cancel")
}

func TestCaptureAfterImmediateCancel(t *testing.T) {
	r := newRecord(day(5))
	c := r.charge(t0, "succeeded", 1)
	r.op(c, 1, "authorize", "succeeded", 20, "0001")
	r.op(c, 1, "capture", "succeeded", 700, "0001")
	cancelAt := day(1)
	r.event("cancelled", "active", "cancelled", cancelAt, false)
	r.sub.CancelledAt = &cancelAt
	r.obs.Cancels = []ObservedCancel{{When: Interval{rt(500), rt(510)}, Read: rt(520),
		Charges: map[string]ChargeState{c.Key: {Key: c.Key, Status: "capturing", Attempt: 1}}}}
	expect(t, NoCaptureAfterCancel(r.d)) // the capture was under way
	r.obs.Cancels[0].Charges[c.Key] = ChargeState{Key: c.Key, Status: "authorized", Attempt: 1}
	expect(t, NoCaptureAfterCancel(r.d), "when the charge was authorized at attempt 1")
}

func TestDanglingHold(t *testing.T) {
	r := newRecord(day(5))
	c := r.charge(t0, "voided", 1)
	r.op(c, 1, "authorize", "succeeded", 20, "0001")
	expect(t, NoDanglingHolds(r.d), "neither captured nor voided; the charge is voided")
	r.op(c, 1, "void", "succeeded", 40, "0001")
	expect(t, NoDanglingHolds(r.d))
	c.Status, c.ReviewReason = "requires_review", "the gateway refused to void"
	r.d.Ledger = r.d.Ledger[:1]
	expect(t, NoDanglingHolds(r.d))
}

func TestAttemptUsesCardReplacedBeforeIt(t *testing.T) {
	r := newRecord(day(5))
	r.obs.Cards = append(r.obs.Cards, ObservedCard{Gateway: "sim1", Token: "tok_ok_0002", Last4: "0002", Good: true,
		When: Interval{rt(100), rt(110)}})
	c := r.charge(t0, "succeeded", 2)
	r.op(c, 1, "authorize", "declined", 200, "0002")
	r.op(c, 2, "authorize", "succeeded", 300, "0002")
	r.op(c, 2, "capture", "succeeded", 310, "0002")
	expect(t, OperationsUseCurrentCard(r.d))
	r.d.Ledger[1].TokenLast4, r.d.Ledger[2].TokenLast4 = "0001", "0001" // attempt 2 went back to the old card
	expect(t, OperationsUseCurrentCard(r.d), "attempt 2 authorized at sim1 with sim1/…0001")
	r.d.Ledger[2].TokenLast4 = "0002"
	expect(t, OperationsUseCurrentCard(r.d), "capture at sim1 with card …0002, its authorization")
}

func TestEventsChainAndCounts(t *testing.T) {
	r := newRecord(day(5))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", day(1), false)
	r.event("paused", "active", "paused", day(1), false) // the same pause logged twice
	expect(t, EventsMatchTransitions(r.d), "starts from active but event 2 (paused) ended at paused")
	r = newRecord(day(5))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", day(1), false)
	r.event("paused", "paused", "paused", day(2), false) // the pause took another on_resume
	expect(t, EventsMatchTransitions(r.d))
	r.event("paused", "paused", "active", day(3), false)
	expect(t, EventsMatchTransitions(r.d), "paused from \"paused\" to \"active\"")
	r = newRecord(day(5))
	r.paid(t0, 20, "0001")
	r.obs.Cards = append(r.obs.Cards, ObservedCard{Gateway: "sim2", Token: "tok_ok_0002", Last4: "0002", Good: true,
		When: Interval{rt(100), rt(110)}})
	expect(t, EventsMatchTransitions(r.d), "0 payment_method_updated events for 1 card changes")
}

func TestOpenAndDisagreeingCharges(t *testing.T) {
	r := newRecord(day(5))
	c := r.charge(t0, "authorizing", 1)
	expect(t, NoChargeLeftOpen(r.d), "left authorizing")
	c.Status = "failed"
	r.op(c, 1, "authorize", "succeeded", 20, "0001")
	r.op(c, 1, "capture", "succeeded", 30, "0001")
	expect(t, LedgerAgreesWithCharges(r.d), "charge failed (attempt 1) but the gateways recorded 1 succeeded captures")
	r.op(c, 2, "capture", "succeeded", 40, "0001")
	expect(t, AtMostOneCapturePerPeriod(r.d), "2 succeeded captures")
	expect(t, NoCaptureWithoutAuthorization(r.d), "capture without an authorization of attempt 2")
}

func TestFailedChargeNotRetriedByANewGoodCard(t *testing.T) {
	r := newRecord(day(5))
	c := r.charge(t0, "failed", 1)
	r.op(c, 1, "authorize", "declined", 20, "0001")
	r.event("unpaid", "active", "unpaid", t0, true)
	r.obs.UnpaidSince = []time.Time{t0}
	r.event("payment_method_updated", "unpaid", "past_due", day(1), false)
	r.obs.Cards = append(r.obs.Cards, ObservedCard{Gateway: "sim1", Token: "tok_ok_0002", Last4: "0002", Good: true,
		When: Interval{rt(300), rt(310)}, StatusAfter: "past_due"})
	expect(t, OwedPeriodsSettled(r.d), "did not retry it")
}

// unpaidAsOf is a subscription whose dunning ended as of day 38 (the due
// time of its last attempt) and that the log shows unpaid only on day 69:
// the period of Mar 10 began in between.
func unpaidAsOf() *record {
	r := newRecord(day(70))
	r.paid(t0, 20, "0001")
	c := r.charge(t0.AddDate(0, 1, 0), "failed", 5)
	r.op(c, 5, "authorize", "declined", 900, "0001")
	r.event("past_due", "active", "past_due", t0.AddDate(0, 1, 0), true)
	r.event("unpaid", "past_due", "unpaid", day(69), true)
	r.obs.UnpaidSince = []time.Time{day(38)}
	return r
}

// Decision 7: an attempt of a period that began after the dunning ended
// whose capture was sent before the end was processed stands: one capture
// is no violation.
func TestUnpaidAsOfPeriodCapturedOnce(t *testing.T) {
	r := unpaidAsOf()
	r.paid(t0.AddDate(0, 2, 0), 990, "0001")
	expect(t, OwedPeriodsSettled(r.d))
}

// ... but the period is paid once at most.
func TestUnpaidAsOfPeriodCapturedTwice(t *testing.T) {
	r := unpaidAsOf()
	c := r.paid(t0.AddDate(0, 2, 0), 990, "0001")
	r.op(c, 2, "authorize", "succeeded", 1000, "0002")
	r.op(c, 2, "capture", "succeeded", 1005, "0002")
	expect(t, OwedPeriodsSettled(r.d), "period 2027-03-10", "captured 2 times")
}

// A period that began after the log shows unpaid is not owed at all.
func TestUnpaidPeriodCaptured(t *testing.T) {
	r := unpaidAsOf()
	r.d.Now = day(100)
	r.paid(t0.AddDate(0, 3, 0), 1200, "0001")
	expect(t, OwedPeriodsSettled(r.d), "period 2027-04-10", "captured 1 times")
}

func TestResolvedFailedMakesUnpaidFromThen(t *testing.T) {
	r := newRecord(day(70))
	c := r.charge(t0, "failed", 1)
	c.Resolution, c.ReviewReason = "failed", "the gateway did nothing"
	r.paid(t0.AddDate(0, 1, 0), 500, "0001")
	v := r.charge(t0.AddDate(0, 2, 0), "voided", 1) // Mar 10 began while active
	v.FailureCode = "subscription_unpaid"
	r.event("unpaid", "active", "unpaid", day(65), true)
	r.obs.UnpaidSince = []time.Time{t0} // backdated to the charge's last attempt
	r.obs.Resolves = []ObservedResolve{{ChargeID: c.ID, Outcome: "failed", Clock: day(65)}}
	expect(t, OwedPeriodsSettled(r.d), "period 2027-03-10", "voided (subscription_unpaid) although the subscription was never cancelled")
}

func TestResumeInTheInstantOfTheAnchorIsNoMove(t *testing.T) {
	r := newRecord(day(5))
	r.event("cancel_scheduled", "active", "active", t0, false)
	r.event("paused", "active", "paused", t0, false)
	r.event("resumed", "paused", "active", t0, false)
	r.obs.Resumes = []ObservedResume{{When: Interval{rt(900), rt(910)}, BillingAnchor: t0}}
	r.paid(t0, 20, "0001")
	for _, v := range OwedPeriodsSettled(r.d) {
		if strings.Contains(v.Detail, "moved the anchor") {
			t.Errorf("a resume in the anchor's instant kept it: %v", v)
		}
	}
}

// fine builds a fine of 100000 (50000 before day 5) carried by one
// enrollment, whose charge key is its enrollment id and UIN.
func fine(status string) *Data {
	disc, ends := int64(50000), day(5)
	uin := "18810100000000000017"
	return &Data{Now: day(30), Fines: []Fine{{UIN: uin, Amount: 100000, DiscountedAmount: &disc, DiscountEnds: &ends,
		Bills: []FineBill{{EnrollmentID: "enr1", Status: status, ChargeKey: "enr1:" + uin}}}}}
}

func (f *Fine) outside(seq int64, amount int64, at time.Time) {
	f.Book = append(f.Book, BookEntry{Seq: seq, PaymentID: "outside-" + itoa(int(seq)), Gateway: OutsideGateway, Amount: amount,
		Status: "accepted", At: at})
}

// rebill adds rebill's posting of attempt (book entry seq) and, when
// captured, its hold and capture.
func (f *Fine) rebill(seq int64, attempt int, amount int64, at time.Time, status string, captured bool) {
	key := f.Bills[0].ChargeKey
	f.Book = append(f.Book, BookEntry{Seq: seq, PaymentID: "pay-" + itoa(int(seq)), Gateway: "gmp1", Amount: amount, Status: status,
		At: at, ChargeKey: key, Attempt: attempt})
	f.Holds = append(f.Holds, FineOp{ChargeKey: key, Attempt: attempt, Amount: amount, At: at.Add(-time.Second)})
	if captured {
		f.Captures = append(f.Captures, FineOp{ChargeKey: key, Attempt: attempt, Amount: amount, At: at.Add(time.Second)})
	}
}

func TestPaidElsewhereFineNotPaidByRebill(t *testing.T) {
	d := fine("paid_elsewhere")
	f := &d.Fines[0]
	f.outside(1, 100000, day(1))
	expect(t, CheckAll(d))

	f.rebill(2, 1, 100000, day(2), "annulled", false) // an attempt held and released: its posting annulled
	expect(t, PaidElsewhereNotPaidByRebill(d))

	d = fine("paid_elsewhere")
	d.Fines[0].outside(1, 100000, day(1))
	d.Fines[0].rebill(2, 1, 100000, day(2), "accepted", false)
	expect(t, PaidElsewhereNotPaidByRebill(d), "stands accepted")

	d = fine("paid_elsewhere")
	d.Fines[0].rebill(1, 1, 100000, day(2), "accepted", true)
	d.Fines[0].outside(2, 100000, day(3))
	expect(t, PaidElsewhereNotPaidByRebill(d), "paid_elsewhere (enrollments enr1) but a1 captured 100000")
}

func TestFineNotOverpaidByRebill(t *testing.T) {
	d := fine("paid")
	f := &d.Fines[0]
	f.outside(1, 30000, day(6))
	f.rebill(2, 1, 70000, day(6.5), "accepted", true) // the rest
	f.outside(3, 100000, day(7))                      // paid again at a bank afterwards: not rebill's doing
	expect(t, CheckAll(d))

	d = fine("paid")
	d.Fines[0].outside(1, 30000, day(6))
	d.Fines[0].rebill(2, 1, 100000, day(6.5), "accepted", true)
	expect(t, FineNotOverpaidByRebill(d), "130000 in all")

	d = fine("paid")
	d.Fines[0].outside(1, 100000, day(6))
	d.Fines[0].rebill(2, 1, 100000, day(6.5), "annulled", false) // released unposted would have no entry; annulled, not captured
	d.Fines[0].rebill(3, 2, 20000, day(7), "accepted", true)
	expect(t, FineNotOverpaidByRebill(d), "a2 captured 20000 after 100000 was paid outside rebill")
}

func TestFinePaidBeforeHoldNotCaptured(t *testing.T) {
	d := fine("paid")
	f := &d.Fines[0]
	f.rebill(1, 1, 50000, day(1), "accepted", true)
	f.outside(2, 100000, day(2)) // after rebill's hold: the payer's overpayment
	expect(t, FinePaidBeforeHoldNotCaptured(d))

	d = fine("paid")
	d.Fines[0].outside(1, 30000, day(1))
	d.Fines[0].outside(2, 70000, day(6))
	d.Fines[0].rebill(3, 1, 100000, day(7), "accepted", true)
	expect(t, FinePaidBeforeHoldNotCaptured(d), "paid in full outside rebill by outside-2")

	// The discounted price paid in time pays the fine, even when rebill
	// first holds it after the discount ended.
	d = fine("paid")
	d.Fines[0].outside(1, 50000, day(4))
	d.Fines[0].rebill(2, 1, 50000, day(6), "accepted", true)
	expect(t, FinePaidBeforeHoldNotCaptured(d), "by outside-1")

	// Paid late, the discounted price is only a part: the rest is owed.
	d = fine("paid")
	d.Fines[0].outside(1, 50000, day(5))
	d.Fines[0].rebill(2, 1, 50000, day(6), "accepted", true)
	expect(t, FinePaidBeforeHoldNotCaptured(d))
	expect(t, FineNotOverpaidByRebill(d))
}

func TestFineHoldNotLeftUnposted(t *testing.T) {
	d := fine("paying")
	b := &d.Fines[0].Bills[0]
	b.ChargeStatus, b.Attempt, b.Posting = "authorized", 1, "accepted"
	expect(t, FineHoldNotLeftUnposted(d))
	b.ChargeStatus, b.Attempt, b.Posting = "declined", 1, "cancelled" // released: the next attempt asks again
	expect(t, FineHoldNotLeftUnposted(d))
	b.ChargeStatus, b.Attempt, b.Posting = "authorized", 1, "cancelled"
	expect(t, FineHoldNotLeftUnposted(d), "left authorized at a1, its posting cancelled")
	b.Posting = ""
	expect(t, FineHoldNotLeftUnposted(d), "its posting none")
}

func TestSlotOutlivesItsAttempt(t *testing.T) {
	d := &Data{Subscriptions: []Subscription{{ID: subID, Charges: []Charge{
		{ID: "c-flight", SubscriptionID: subID, Status: "authorizing", AttemptCount: 1},
		{ID: "c-unknown", SubscriptionID: subID, Status: "unknown", AttemptCount: 1},
		{ID: "c-review", SubscriptionID: subID, Status: "requires_review", AttemptCount: 1},
		{ID: "c-retried", SubscriptionID: subID, Status: "authorizing", AttemptCount: 2},
	}}}}
	d.Slots = []Slot{{"cus", "c-flight/1"}, {"cus", "c-unknown/1"}}
	if vs := NoSlotOutlivesItsAttempt(d); len(vs) != 0 {
		t.Fatalf("attempts in flight hold their slots: %v", vs)
	}
	d.Slots = append(d.Slots, Slot{"cus", "c-review/1"}, Slot{"cus", "c-retried/1"}, Slot{"cus", "c-gone/1"})
	vs := NoSlotOutlivesItsAttempt(d)
	if len(vs) != 3 {
		t.Fatalf("want the slots of review, of a replaced attempt and of no charge, got %v", vs)
	}
	for _, v := range vs {
		if v.Invariant != "slot-outlives-attempt" {
			t.Fatalf("invariant %q", v.Invariant)
		}
	}
}

// A resume, a pause, a card change and a resume again, all in one instant
// of the service clock: the first resume moved the anchor and its period's
// charge may start from then, with the card of that moment; the second
// resume, in the instant of the anchor, moves nothing.
func TestSecondResumeInTheAnchorsInstantKeepsTheFirstResumesDueTime(t *testing.T) {
	r := newRecord(day(20))
	r.paid(t0, 20, "0001")
	r.event("paused", "active", "paused", day(5), false)
	r.event("resumed", "paused", "active", day(12), false)
	r.event("paused", "active", "paused", day(12), false)
	r.event("payment_method_updated", "paused", "paused", day(12), false)
	r.event("resumed", "paused", "active", day(12), false)
	r.sub.BillingAnchor = day(12)
	r.obs.Resumes = []ObservedResume{{When: Interval{rt(900), rt(910)}, BillingAnchor: day(12)},
		{When: Interval{rt(1200), rt(1210)}, BillingAnchor: day(12)}}
	r.obs.Cards = append(r.obs.Cards, ObservedCard{Gateway: "sim1", Token: "tok_ok_0002", Last4: "0002", Good: true,
		When: Interval{rt(1000), rt(1010)}})
	r.paid(day(12), 1300, "0001") // its hold started at the first resume, with the card of then
	expect(t, OperationsUseCurrentCard(r.d))
}
