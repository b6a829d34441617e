package soak

import (
	"strings"
	"testing"
	"time"
)

// upgraded is a monthly subscription of 500 paid for January 10..February
// 10 and raised to 800 on day 10 with charge_now: 300 for 21 of the
// period's 31 days.
func upgraded() (*record, *Change) {
	r := newRecord(day(40))
	r.paid(t0, 100, "0001")
	at := day(10)
	ch := Change{ID: "chg1", Effective: "now", Proration: "charge_now", AmountBefore: 500, AmountAfter: 800,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: 203, CreatedAt: at, AppliedAt: &at} // 300 * 21/31 = 203.2
	r.sub.Changes = append(r.sub.Changes, ch)
	r.event("updated", "active", "active", at, false)
	adj := r.charge(t0, "succeeded", 1)
	adj.PeriodKey += ":adj:chg1"
	adj.Key, adj.ID, adj.Amount = subID+":"+adj.PeriodKey, subID+":"+adj.PeriodKey, 203
	r.op(adj, 1, "authorize", "succeeded", 200, "0001")
	r.op(adj, 1, "capture", "succeeded", 205, "0001")
	r.d.Ledger[len(r.d.Ledger)-1].Amount, r.d.Ledger[len(r.d.Ledger)-2].Amount = 203, 203
	next := r.paid(t0.AddDate(0, 1, 0), 300, "0001")
	next.Amount = 800
	r.d.Ledger[len(r.d.Ledger)-1].Amount, r.d.Ledger[len(r.d.Ledger)-2].Amount = 800, 800
	r.sub.Amount = 800
	return r, &r.sub.Changes[0]
}

func TestUpgradeChargedTheFormulaOnceAndTheNextPeriodAtTheNewPrice(t *testing.T) {
	r, _ := upgraded()
	expect(t, CheckAll(r.d))
}

func TestAdjustmentOffTheFormulaIsCaught(t *testing.T) {
	r, ch := upgraded()
	ch.Adjustment = 204
	r.sub.Charges[1].Amount = 204
	expect(t, AdjustmentsMatchTheirChanges(r.d), AdjustmentsExact)
}

func TestAdjustmentChargedTwiceIsCaught(t *testing.T) {
	r, _ := upgraded()
	dup := r.sub.Charges[1]
	dup.PeriodKey = t0.Format("2006-01-02") + ":adj:chg1"
	dup.ID = "other"
	r.sub.Charges = append(r.sub.Charges, dup)
	expect(t, AdjustmentsMatchTheirChanges(r.d), AdjustmentsExact)
}

func TestPeriodAtTheOldPriceAfterAChangeIsCaught(t *testing.T) {
	r, _ := upgraded()
	r.sub.Charges[2].Amount = 500
	expect(t, PeriodsChargedAtThePriceInForce(r.d), PricesInForce)
}

func TestPendingUpdateAppliesFromItsBoundary(t *testing.T) {
	r := newRecord(day(40))
	r.paid(t0, 100, "0001")
	boundary := t0.AddDate(0, 1, 0)
	ch := Change{ID: "chg2", Effective: "period_end", Proration: "none", AmountBefore: 500, AmountAfter: 300,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, CreatedAt: day(3), AppliedAt: &boundary}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.event("updated", "active", "active", boundary.Add(time.Second), true)
	next := r.paid(boundary, 300, "0001")
	next.Amount = 300
	r.sub.Amount = 300
	expect(t, CheckAll(r.d))
	next.Amount = 500
	expect(t, PeriodsChargedAtThePriceInForce(r.d), PricesInForce)
}

// A downgrade's credit is capped by what was captured: nothing when the
// period's charge never paid.
func TestCreditBeyondWhatWasCapturedIsCaught(t *testing.T) {
	r := newRecord(day(20))
	r.charge(t0, "failed", 1)
	at := day(10)
	ch := Change{ID: "chg3", Effective: "now", Proration: "credit_next", AmountBefore: 500, AmountAfter: 200,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: -203, CreatedAt: at, AppliedAt: &at} // 300 * 21/31, but nothing was captured
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Credits = append(r.sub.Credits, Credit{ChangeID: "chg3", Amount: 203, At: at})
	r.event("updated", "active", "active", at, false)
	expect(t, CreditsNeverBeyondWhatWasCaptured(r.d), CreditsWithinCaptured)
	r.sub.Changes[0].Adjustment, r.sub.Credits[0].Amount = 0, 0
	expect(t, CreditsNeverBeyondWhatWasCaptured(r.d))
}

// An interval change restarts the grid at the change: its first period
// begins then at the new price, and the old period's unused share is the
// credit, used by that first period.
func TestIntervalChangeRestartsTheGridWithCredit(t *testing.T) {
	r := newRecord(day(12))
	r.paid(t0, 100, "0001")
	at := day(10)
	ch := Change{ID: "chg4", Effective: "now", Proration: "charge_now", AmountBefore: 500, AmountAfter: 100,
		IntervalBefore: "month", IntervalAfter: "week", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: -339, CreatedAt: at, AppliedAt: &at} // 500 * 21/31 = 338.7
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Credits = append(r.sub.Credits, Credit{ChangeID: "chg4", Amount: 339, At: at},
		Credit{PeriodKey: at.Format("2006-01-02") + "~chg4", PeriodStart: &at, Amount: -100, At: at})
	r.sub.Interval, r.sub.Amount, r.sub.BillingAnchor = "week", 100, at
	r.event("updated", "active", "active", at, false)
	expect(t, CheckAll(r.d))
	// The first period of the new grid left uncharged and unpaid by credit
	// is a period never charged.
	r.sub.Credits = r.sub.Credits[:1]
	expect(t, OwedPeriodsSettled(r.d), "owed-periods-settled")
}

// A pause that continues its period: the next period begins the paid
// time left after the resume, not at the resume.
func TestContinuedPauseMovesTheAnchorByThePaidTimeLeft(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 100, "0001")
	pause, resume := day(10), day(40)
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "continue_period"})
	r.event("resumed", "paused", "active", resume, false)
	next := resume.Add(t0.AddDate(0, 1, 0).Sub(pause)) // 21 days after the resume
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: next})
	r.paid(next, 400, "0001")
	expect(t, CheckAll(r.d))
	// A resume that charged at once (a new period at the resume) is caught.
	r.obs.Resumes[0].BillingAnchor = resume
	expect(t, OwedPeriodsSettled(r.d), "owed-periods-settled")
}

// A trial: nothing before trial_end, the first period at trial_end once
// the scan ended it.
func TestTrialEndsIntoItsFirstPeriod(t *testing.T) {
	r := newRecord(day(20))
	end := day(14)
	r.sub.Events[0].To = "trialing"
	r.sub.BillingAnchor, r.obs.Anchor, r.sub.TrialEnd = end, end, &end
	r.event("trial_ended", "trialing", "active", end.Add(2*time.Second), true)
	r.paid(end, 100, "0001")
	expect(t, CheckAll(r.d))
}

// An interval change before the grid's first period began (a future
// anchor, the time a continued pause kept) keeps that anchor.
func TestIntervalChangeBeforeTheAnchorKeepsIt(t *testing.T) {
	anchor := day(20)
	r := newRecord(day(30))
	r.sub.BillingAnchor, r.obs.Anchor = anchor, anchor
	at := day(5)
	ch := Change{ID: "chg5", Effective: "now", Proration: "charge_now", AmountBefore: 500, AmountAfter: 500,
		IntervalBefore: "month", IntervalAfter: "week", CountBefore: 1, CountAfter: 1, CreatedAt: at, AppliedAt: &at}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Interval = "week"
	r.event("updated", "active", "active", at, false)
	r.paid(anchor, 100, "0001")
	r.paid(anchor.AddDate(0, 0, 7), 200, "0001")
	expect(t, CheckAll(r.d))
}

// A charge resolved as failed while, in the same instant of the service
// clock, another charge's dunning ended as of an earlier due time: the
// subscription is unpaid as of either, so a period that began between
// them is judged unsure (at most one capture), not owed.
func TestUnpaidByAResolutionOrAnEarlierDunningEndIsUnsureBetween(t *testing.T) {
	r := newRecord(day(45))
	r.sub.Interval = "week"
	r.d.Subscriptions[0].Interval = "week"
	for n := 0; n < 6; n++ {
		r.charge(t0.AddDate(0, 0, 7*n), "failed", 2)
	}
	r.sub.Charges[4].Status, r.sub.Charges[4].FailureCode = "voided", "subscription_unpaid"
	r.event("past_due", "active", "past_due", day(0.1), true)
	at := day(40)
	r.event("unpaid", "past_due", "unpaid", at, true)
	r.obs.UnpaidSince = []time.Time{day(27)}
	r.obs.Resolves = []ObservedResolve{{ChargeID: "x", Outcome: "failed", Clock: at}}
	for _, v := range OwedPeriodsSettled(r.d) {
		if strings.Contains(v.Detail, "voided") {
			t.Errorf("the period between the two ends was judged owed: %s", v)
		}
	}
	r.obs.UnpaidSince = nil
	expect(t, OwedPeriodsSettled(r.d), "voided")
}

// A pause that continues its period, made and resumed in the very instant
// its period began (created, paused, resumed, the clock not moved): the
// period is charged once and the next begins one whole period later.
func TestContinuedPauseInThePeriodsFirstInstant(t *testing.T) {
	r := newRecord(day(100))
	r.paid(t0, 100, "0001")
	r.event("paused", "active", "paused", t0, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: t0, OnResume: "continue_period"})
	r.event("resumed", "paused", "active", t0, false)
	next := t0.AddDate(0, 1, 0)
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: next})
	r.paid(next, 400, "0001")
	r.paid(next.AddDate(0, 1, 0), 500, "0001")
	r.paid(next.AddDate(0, 2, 0), 600, "0001")
	expect(t, CheckAll(r.d))
}

// A change in the same instant as a resume that began a new period (on
// the paid period's day, decision 5: that period, paid once) prorates the
// resumed period, all of it unused.
func TestChangeInTheInstantOfAResumeProratesTheResumedPeriod(t *testing.T) {
	r := newRecord(day(3))
	r.paid(t0, 100, "0001")
	pause, resume := t0.Add(time.Hour), t0.Add(2*time.Hour)
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "start_new_period"})
	r.event("resumed", "paused", "active", resume, false)
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: resume})
	ch := Change{ID: "chg6", Effective: "now", Proration: "charge_now", AmountBefore: 500, AmountAfter: 500,
		IntervalBefore: "month", IntervalAfter: "week", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: -500, CreatedAt: resume, AppliedAt: &resume}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Credits = append(r.sub.Credits, Credit{ChangeID: "chg6", Amount: 500, At: resume},
		Credit{PeriodKey: resume.Format("2006-01-02") + "~chg6", PeriodStart: &resume, Amount: -500, At: resume})
	r.sub.Interval = "week"
	r.event("updated", "active", "active", resume, false)
	for _, v := range append(AdjustmentsMatchTheirChanges(r.d), CreditsNeverBeyondWhatWasCaptured(r.d)...) {
		t.Errorf("unexpected: %s", v)
	}
}

// paidAs adds a succeeded charge of amount for the period starting at
// start whose key ends with suffix (a restarted schedule's).
func (r *record) paidAs(start time.Time, suffix string, amount int64, ms int) *Charge {
	pk := start.Format("2006-01-02") + suffix
	key := subID + ":" + pk
	r.sub.Charges = append(r.sub.Charges, Charge{ID: key, SubscriptionID: subID, PeriodKey: pk,
		PeriodStart: start, Key: key, Amount: amount, Currency: "USD", Gateway: "sim1", Status: "succeeded", AttemptCount: 1})
	c := &r.sub.Charges[len(r.sub.Charges)-1]
	r.op(c, 1, "authorize", "succeeded", ms, "0001")
	r.op(c, 1, "capture", "succeeded", ms+5, "0001")
	r.d.Ledger[len(r.d.Ledger)-1].Amount, r.d.Ledger[len(r.d.Ledger)-2].Amount = amount, amount
	return c
}

// An interval change made now, without proration, in the instant a
// resume began a period that was charged at once: that period keeps its
// charge at the old price, and the schedule the change started charges
// its first period, which begins in the same instant, under the change's
// suffix at the new price. Two charges of one start are two periods here;
// anywhere else they are one period charged twice.
func TestIntervalChangeInTheInstantAChargedPeriodBegan(t *testing.T) {
	r := newRecord(day(9))
	r.paid(t0, 100, "0001")
	pause, resume := t0.Add(time.Hour), day(1)
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "start_new_period"})
	r.event("resumed", "paused", "active", resume, false)
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: resume})
	r.paidAs(resume, "", 500, 320)
	ch := Change{ID: "01a2438b-0000-7000-8000-00007c065427", Effective: "now", Proration: "none", AmountBefore: 500, AmountAfter: 900,
		IntervalBefore: "month", IntervalAfter: "week", CountBefore: 1, CountAfter: 1, CreatedAt: resume, AppliedAt: &resume}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Interval, r.sub.Amount, r.sub.BillingAnchor = "week", 900, resume
	r.event("updated", "active", "active", resume, false)
	first := r.paidAs(resume, "~7c065427", 900, 400)
	r.paidAs(resume.AddDate(0, 0, 7), "~7c065427", 900, 500)
	expect(t, CheckAll(r.d))

	first.Amount = 500
	expect(t, PeriodsChargedAtThePriceInForce(r.d), PricesInForce)
	first.Amount = 900
	r.paidAs(resume.AddDate(0, 0, 7), "", 900, 600)
	expect(t, AtMostOneCapturePerPeriod(r.d), "two charges for the period starting")
}

// Separate pauses begun and ended in one instant of the clock, the first
// starting a new period at its resume and the second continuing its
// period: the answers' paused_at cannot tell them apart, the resumes'
// anchors do.
func TestPausesOfOneInstantInBothModes(t *testing.T) {
	r := newRecord(day(50))
	r.paid(t0, 100, "0001")
	at := t0.Add(2 * time.Hour)
	r.event("paused", "active", "paused", at, false)
	r.event("resumed", "paused", "active", at, false)
	r.event("paused", "active", "paused", at, false)
	r.event("resumed", "paused", "active", at, false)
	r.obs.Pauses = append(r.obs.Pauses,
		ObservedPause{When: Interval{rt(200), rt(210)}, At: at, OnResume: "start_new_period"},
		ObservedPause{When: Interval{rt(300), rt(310)}, At: at, OnResume: "continue_period"})
	next := at.AddDate(0, 1, 0) // the period the first resume began, kept whole
	r.obs.Resumes = append(r.obs.Resumes,
		ObservedResume{When: Interval{rt(250), rt(260)}, BillingAnchor: at},
		ObservedResume{When: Interval{rt(350), rt(360)}, BillingAnchor: next})
	r.paid(next, 400, "0001")
	expect(t, CheckAll(r.d))
	// The continued pause's next period left uncharged is caught.
	r.sub.Charges = r.sub.Charges[:1]
	expect(t, OwedPeriodsSettled(r.d), "never charged")
}

// A pause that continues its period keeps the time left at the pause,
// on the grid in force then, even when an interval change while paused
// restarted the schedule: the next period begins that long after the
// resume.
func TestContinuedPauseKeepsItsTimeThroughAnIntervalChange(t *testing.T) {
	r := newRecord(day(70))
	r.paid(t0, 100, "0001")
	pause, change, resume := day(10), day(20), day(40)
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "continue_period"})
	ch := Change{ID: "01a2438b-0000-7000-8000-0000000c4a2e", Effective: "now", Proration: "none", AmountBefore: 500, AmountAfter: 500,
		IntervalBefore: "month", IntervalAfter: "week", CountBefore: 1, CountAfter: 1, CreatedAt: change, AppliedAt: &change}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.sub.Interval = "week"
	r.event("updated", "paused", "paused", change, false)
	r.event("resumed", "paused", "active", resume, false)
	next := resume.Add(t0.AddDate(0, 1, 0).Sub(pause)) // 21 days after the resume
	r.sub.BillingAnchor = next
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: next})
	r.paidAs(next, "~000c4a2e", 500, 400)
	r.paidAs(next.AddDate(0, 0, 7), "~000c4a2e", 500, 500)
	expect(t, CheckAll(r.d))
	// The time kept read from the grid the change started (the pause
	// keeping nothing of the old period) is caught.
	r.obs.Resumes[0].BillingAnchor = resume
	expect(t, OwedPeriodsSettled(r.d), "owed-periods-settled")
}

// Two immediate changes in one instant of the clock, collected in an order
// their ids give (derived from Idempotency-Keys, in no order): the first
// period keeps the price asked at creation, each change starting from the
// terms the other left.
func TestChangesOfOneInstantAreChained(t *testing.T) {
	r := newRecord(day(40))
	r.paid(t0, 100, "0001")
	at := day(3)
	second := Change{ID: "0000000000000000000000000000000a", Effective: "now", Proration: "none", AmountBefore: 700, AmountAfter: 900,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, CreatedAt: at, AppliedAt: &at}
	first := Change{ID: "0000000000000000000000000000000b", Effective: "now", Proration: "none", AmountBefore: 500, AmountAfter: 700,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, CreatedAt: at, AppliedAt: &at}
	r.sub.Changes = append(r.sub.Changes, second, first)
	r.event("updated", "active", "active", at, false)
	r.event("updated", "active", "active", at, false)
	next := r.paid(t0.AddDate(0, 1, 0), 300, "0001")
	next.Amount = 900
	r.d.Ledger[len(r.d.Ledger)-1].Amount, r.d.Ledger[len(r.d.Ledger)-2].Amount = 900, 900
	r.sub.Amount = 900
	expect(t, CheckAll(r.d))
	if got := appliedChanges(r.sub.Changes); got[0].ID != first.ID {
		t.Fatalf("changes of one instant not chained: %s first", got[0].ID)
	}
}

// Dunning ended as of an earlier due time (the sample shows it) for a
// charge a card change then paid, and a person resolved another charge as
// failed in the instant the end was processed: the periods between are
// unsure, not owed, though no charge is failed by its dunning any more.
func TestUnpaidByAnEarlierDunningEndOfAChargePaidSince(t *testing.T) {
	r := newRecord(day(45))
	r.sub.Interval = "week"
	r.d.Subscriptions[0].Interval = "week"
	first := r.paid(t0, 100, "0001")
	first.AttemptCount = 5
	for n := 1; n < 6; n++ {
		r.charge(t0.AddDate(0, 0, 7*n), "failed", 1)
		r.sub.Charges[len(r.sub.Charges)-1].Resolution = "failed"
	}
	r.sub.Charges[4].Status, r.sub.Charges[4].FailureCode, r.sub.Charges[4].Resolution = "voided", "subscription_unpaid", ""
	r.event("past_due", "active", "past_due", day(0.1), true)
	at := day(40)
	r.event("unpaid", "past_due", "unpaid", at, true)
	r.obs.UnpaidSince = []time.Time{day(27)}
	r.obs.Resolves = []ObservedResolve{{ChargeID: "x", Outcome: "failed", Clock: at}}
	for _, v := range OwedPeriodsSettled(r.d) {
		if strings.Contains(v.Detail, "voided") {
			t.Errorf("the period between the dunning end and the resolution was judged owed: %s", v)
		}
	}
}

// A resume on the day of a period credit paid whole begins that period
// again (decision 5: its key, paid once): it has no charge and uses no
// more credit, and is not owed a charge.
func TestResumeOnTheDayOfAPeriodPaidByCreditIsThatPeriod(t *testing.T) {
	r := newRecord(day(40))
	r.paid(t0, 100, "0001")
	ch := Change{ID: "chg7", Effective: "now", Proration: "credit_next", AmountBefore: 500, AmountAfter: 200,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: -300, CreatedAt: t0, AppliedAt: &t0}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.event("updated", "active", "active", t0, false)
	r.sub.Amount = 200
	next := t0.AddDate(0, 1, 0)
	pause, resume := next.Add(time.Hour), next.Add(2*time.Hour)
	r.sub.Credits = append(r.sub.Credits, Credit{ChangeID: "chg7", PeriodKey: t0.Format("2006-01-02"), Amount: 300, At: t0},
		Credit{PeriodKey: next.Format("2006-01-02"), PeriodStart: &next, Amount: -200, At: next})
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "start_new_period"})
	r.event("resumed", "paused", "active", resume, false)
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: resume})
	r.sub.BillingAnchor = resume
	expect(t, CheckAll(r.d))
}

// The credit a downgrade earned from a resumed period charged in full,
// spent on that same period (the seed 913302 shape), adds up to no price.
func TestCreditUsedOnThePeriodThatEarnedItIsCaught(t *testing.T) {
	r := newRecord(day(3))
	r.paid(t0, 100, "0001")
	pause, resume := t0.Add(time.Hour), t0.Add(2*time.Hour)
	r.event("paused", "active", "paused", pause, false)
	r.obs.Pauses = append(r.obs.Pauses, ObservedPause{When: Interval{rt(200), rt(210)}, At: pause, OnResume: "start_new_period"})
	r.event("resumed", "paused", "active", resume, false)
	r.obs.Resumes = append(r.obs.Resumes, ObservedResume{When: Interval{rt(300), rt(310)}, BillingAnchor: resume})
	r.sub.BillingAnchor = resume
	ch := Change{ID: "chg8", Effective: "now", Proration: "charge_now", AmountBefore: 500, AmountAfter: 400,
		IntervalBefore: "month", IntervalAfter: "month", CountBefore: 1, CountAfter: 1, PeriodKey: t0.Format("2006-01-02"),
		Adjustment: -100, CreatedAt: resume, AppliedAt: &resume}
	r.sub.Changes = append(r.sub.Changes, ch)
	r.event("updated", "active", "active", resume, false)
	r.sub.Amount = 400
	r.sub.Credits = append(r.sub.Credits, Credit{ChangeID: "chg8", PeriodKey: t0.Format("2006-01-02"), Amount: 100, At: resume})
	expect(t, PeriodsChargedAtThePriceInForce(r.d))
	r.sub.Credits = append(r.sub.Credits, Credit{PeriodKey: t0.Format("2006-01-02"), PeriodStart: &resume, Amount: -100, At: resume})
	expect(t, PeriodsChargedAtThePriceInForce(r.d), "charged 500 with 100 of credit (600)")
}
