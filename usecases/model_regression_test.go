package usecases_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// Regression tests for what TestModel found: each is the
// shrunk sequence of actions, written out, on the same world (real stores,
// use cases, scan and pipeline; the fake gateway's ledger). The model
// starts every sequence at modelStart, 2027-01-30 09:00 UTC.

// scenario drives one world step by step.
type scenario struct {
	t   *testing.T
	ctx context.Context
	w   *world
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	s := &scenario{t: t, ctx: context.Background(), w: newWorld(t)}
	require.NoError(t, s.w.reset(s.ctx))
	return s
}

func (s *scenario) inTx(fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(s.ctx, s.w.pool, fn)
}

// create makes a subscription anchored now; its first charge is enqueued.
func (s *scenario) create(interval period.Interval, token string) uuid.UUID {
	s.t.Helper()
	var sub subscriptions.Subscription
	require.NoError(s.t, s.inTx(func(tx pgx.Tx) (err error) {
		sub, err = s.w.svc.CreateSubscription(s.ctx, tx, staff, subscriptions.New{CustomerID: "cust", Amount: 1000,
			Currency: "EUR", Interval: interval, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card(token)})
		return err
	}))
	return sub.ID
}

func (s *scenario) advance(d time.Duration) { s.w.clock.Advance(d) }

func (s *scenario) scan() {
	s.t.Helper()
	_, err := s.w.renewals.Scan(s.ctx, s.w.clock.Now())
	require.NoError(s.t, err)
}

// run works the first runnable job of kind with the gateway answering a,
// and returns what River recorded.
func (s *scenario) run(kind string, a answers) jobOutcome {
	s.t.Helper()
	jobs, err := s.w.runnable(s.ctx, nil)
	require.NoError(s.t, err)
	for _, j := range jobs {
		if j.kind == kind {
			s.w.gw.setPlan(a)
			out, err := s.w.runJob(s.ctx, j)
			s.w.gw.setPlan(answers{})
			require.NoError(s.t, err)
			return out
		}
	}
	s.t.Fatalf("no runnable %s job (runnable: %v)", kind, jobs)
	return jobOutcome{}
}

// pay runs the authorize and capture of the next charge with good answers.
func (s *scenario) pay() {
	s.t.Helper()
	s.run(charges.AuthorizeArgs{}.Kind(), answers{})
	s.run(charges.CaptureArgs{}.Kind(), answers{})
}

func (s *scenario) sub(id uuid.UUID) subscriptions.Subscription {
	s.t.Helper()
	sub, err := s.w.svc.Subscriptions.Get(s.ctx, s.w.pool, id)
	require.NoError(s.t, err)
	return sub
}

// charges lists the subscription's charges, oldest period first.
func (s *scenario) charges(id uuid.UUID) []charges.Charge {
	s.t.Helper()
	cs, err := charges.ListBySubscription(s.ctx, s.w.pool, id, uuid.Nil, 100)
	require.NoError(s.t, err)
	for i, j := 0, len(cs)-1; i < j; i, j = i+1, j-1 {
		cs[i], cs[j] = cs[j], cs[i]
	}
	return cs
}

func (s *scenario) periodKeys(id uuid.UUID) []string {
	var keys []string
	for _, c := range s.charges(id) {
		keys = append(keys, c.PeriodKey)
	}
	return keys
}

// The world itself: two periods of a daily subscription are each paid
// once, and the fake gateway's ledger shows one hold and one capture per
// period, each under its attempt's keys.
func TestWorldPaysEachPeriodOnce(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.pay()
	s.advance(24 * time.Hour)
	s.scan()
	s.pay()
	require.Equal(t, []string{"2027-01-30", "2027-01-31"}, s.periodKeys(id))
	for _, c := range s.charges(id) {
		require.Equal(t, charges.Succeeded, c.Status)
	}
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
	v := s.w.gw.view()
	require.Empty(t, v.check())
	require.Len(t, v.ops, 4)
	require.Len(t, v.captures(), 2)
}

// at is a time on the model's first days: day 30 is 2027-01-30.
func at(month time.Month, day, hour int) time.Time {
	return time.Date(2027, month, day, hour, 0, 0, 0, time.UTC)
}

// Minimal sequence: create a daily subscription; advance 24h
// (its second period begins; the scan has not run); cancel at period end.
// The scan then cancelled it as of the start of the period that had
// begun, 2027-01-31 09:00, before the customer asked, and that period was
// never charged. Decision 6: the current period ends, then nothing more.
func TestCancelAtPeriodEndChargesThePeriodThatBegan(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.advance(24 * time.Hour)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.Cancel(s.ctx, tx, staff, id, true)
		return err
	}))
	require.Equal(t, []string{"2027-01-30", "2027-01-31"}, s.periodKeys(id), "the period that began is owed")
	sub := s.sub(id)
	require.True(t, sub.CancelAtPeriodEnd)
	require.WithinDuration(t, at(time.February, 1, 9), sub.NextChargeAt, 0, "the cancel takes effect when that period ends")

	s.advance(24 * time.Hour)
	s.scan()
	sub = s.sub(id)
	require.Equal(t, subscriptions.Cancelled, sub.Status)
	require.WithinDuration(t, at(time.February, 1, 9), *sub.CancelledAt, 0)
	require.Equal(t, []string{"2027-01-30", "2027-01-31"}, s.periodKeys(id))
}

// The same race with a pause: a period that began before the
// pause is owed (decision 4), also when the scan had not reached it.
func TestPauseChargesThePeriodThatBegan(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.advance(24 * time.Hour)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.Pause(s.ctx, tx, staff, id, nil, "")
		return err
	}))
	require.Equal(t, []string{"2027-01-30", "2027-01-31"}, s.periodKeys(id), "the period that began before the pause is owed")
	require.Equal(t, subscriptions.Paused, s.sub(id).Status)
}

// Minimal sequence: create a daily subscription at 09:00
// (period 2027-01-30 charged); pause it with resume_at 10:00; advance 1h;
// scan. The resume starts a new period at 10:00 (decision 5), but a
// period's key is its start date, and 2027-01-30 names the period charged
// at 09:00: the unique key kept it from being charged a second time that
// day, silently. Decision 5 now says so: that period is the paid one, and
// the next begins one interval after the resume.
func TestResumeOnTheDayOfAChargedPeriodIsThatPeriod(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.pay()
	resumeAt := s.w.clock.Now().Add(time.Hour)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.Pause(s.ctx, tx, staff, id, &resumeAt, "")
		return err
	}))
	s.advance(time.Hour)
	s.scan()
	sub := s.sub(id)
	require.Equal(t, subscriptions.Active, sub.Status, "resumed at resume_at")
	require.WithinDuration(t, resumeAt, sub.BillingAnchor, 0)
	require.WithinDuration(t, resumeAt.Add(24*time.Hour), sub.NextChargeAt, 0, "the next period begins a day after the resume")
	require.Len(t, s.charges(id), 1, "the day's period is paid once")

	s.advance(24 * time.Hour)
	s.scan()
	cs := s.charges(id)
	require.Len(t, cs, 2, "the next period is charged when it begins")
	require.WithinDuration(t, resumeAt.Add(24*time.Hour), cs[1].PeriodStart, 0)
}

// Minimal sequence: create a daily subscription; cancel at
// period end; its first charge is hard-declined (unpaid); advance 24h;
// scan. The period ended, but the subscription stayed unpaid with the
// cancel scheduled, for ever: the scan carried out scheduled cancels of
// paused subscriptions only. Decision 6: it is cancelled when the period
// ends.
func TestScheduledCancelTakesEffectWhileUnpaid(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.Cancel(s.ctx, tx, staff, id, true)
		return err
	}))
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	require.Equal(t, subscriptions.Unpaid, s.sub(id).Status)
	s.advance(24 * time.Hour)
	s.scan()
	sub := s.sub(id)
	require.Equal(t, subscriptions.Cancelled, sub.Status)
	require.WithinDuration(t, at(time.January, 31, 9), *sub.CancelledAt, 0, "as of the period's end")
	require.False(t, sub.CancelAtPeriodEnd)
}

// Minimal sequence: create a daily subscription; its first
// charge is hard-declined (do_not_honor: unpaid); send the same card
// again. The customer's "try again" failed with a database error
// (RetryUnpaid set unpaid_since twice: "multiple assignments to same
// column"), on every unpaid subscription whose card is not reported lost
// or stolen, dunning exhausted included. Decision 7: it is retried.
func TestSameCardAgainOnAnUnpaidSubscriptionRetries(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	require.Equal(t, subscriptions.Unpaid, s.sub(id).Status)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ChangePaymentMethod(s.ctx, tx, staff, id, card("tok_1"))
		return err
	}))
	sub := s.sub(id)
	require.Equal(t, subscriptions.PastDue, sub.Status)
	require.Nil(t, sub.UnpaidSince)
	cs := s.charges(id)
	require.Equal(t, charges.Scheduled, cs[0].Status)
	require.Equal(t, 2, cs[0].AttemptCount, "retried at once under a new key")
	s.pay()
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
}

// Minimal sequence: create a daily subscription; advance 24h;
// its first charge is hard-declined (unpaid since 2027-01-30 09:00);
// support retries it, and it is paid. The subscription became active but
// kept its next period, 2027-01-31, which began while it was unpaid: the
// next scan charged it. Written here with three unpaid days. Decisions 7
// and 18: periods that began while unpaid are not owed, however the
// subscription recovers (a card change already skipped them).
func TestPaymentOfAnUnpaidSubscriptionSkipsTheUnpaidPeriods(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	require.Equal(t, subscriptions.Unpaid, s.sub(id).Status)
	s.advance(3*24*time.Hour + time.Hour) // 2027-02-02 10:00: three periods began while unpaid
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.RetryCharge(s.ctx, tx, staff, s.charges(id)[0].ID)
		return err
	}))
	s.pay()
	sub := s.sub(id)
	require.Equal(t, subscriptions.Active, sub.Status)
	require.WithinDuration(t, at(time.February, 3, 9), sub.NextChargeAt, 0, "billing goes on after the unpaid periods")
	s.scan()
	require.Equal(t, []string{"2027-01-30"}, s.periodKeys(id), "no period that began while unpaid is charged")
}

// reviewWithHold puts the subscription's first charge in review while its
// authorization is live at the gateway: the authorize acts but its answer
// is lost, the lookups find the gateway unavailable for longer than
// modelUnavailableFor, and the charge goes to review with its hold check
// (release_hold) enqueued.
func (s *scenario) reviewWithHold(id uuid.UUID) charges.Charge {
	s.t.Helper()
	s.run(charges.AuthorizeArgs{}.Kind(), answers{money: faultTimeoutAfter})
	s.run(charges.LookupArgs{}.Kind(), answers{lookup: faultUnavailable})
	s.advance(modelUnavailableFor + time.Hour)
	s.run(charges.LookupArgs{}.Kind(), answers{lookup: faultUnavailable})
	c := s.charges(id)[0]
	require.Equal(s.t, charges.RequiresReview, c.Status)
	require.Len(s.t, s.liveHolds(), 1)
	return c
}

func (s *scenario) liveHolds() []string {
	var live []string
	for _, h := range s.w.gw.view().holds {
		if h.capturedBy == "" && h.voidedBy == "" {
			live = append(live, h.ref)
		}
	}
	return live
}

// Minimal sequence: a charge goes to review while its
// authorization is live (authorize answer lost, lookups unavailable past
// the limit); a person resolves it as failed (the provider shows no
// capture) before its hold check runs; the hold check then runs. It found
// the charge no longer in review and did nothing: the customer's money
// stayed held. Decision 11: a hold that nothing captured is voided.
func TestResolvedAsFailedStillReleasesTheHold(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	c := s.reviewWithHold(id)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ResolveCharge(s.ctx, tx, staff, c.ID, charges.Resolution{Outcome: charges.Failed,
			Evidence: "fake ledger: no capture under " + c.GatewayKey(gateway.OpCapture), Actor: "support"})
		return err
	}))
	s.run(charges.ReleaseHoldArgs{}.Kind(), answers{})
	require.Empty(t, s.liveHolds(), "the hold is voided")
	c = s.charges(id)[0]
	require.Equal(t, charges.Failed, c.Status, "the person's verdict stands")
	require.NotNil(t, c.HoldReleasedAt)
	require.Empty(t, s.w.gw.view().check())
}

// Minimal sequence: a charge goes to review while its
// authorization is live; its hold check's lookups time out on each of the
// job's River attempts. River discarded the job, and nothing else ever
// releases the hold (the scan's sweep of discarded jobs skips hold checks,
// the charge being in review already). Lookups and a void under the
// attempt's key are safe to repeat: the check now waits out timeouts as
// it waits out a 503.
func TestHoldCheckOutlastsLookupTimeouts(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.reviewWithHold(id)
	for range modelMaxAttempts + 1 {
		s.run(charges.ReleaseHoldArgs{}.Kind(), answers{lookup: faultTimeoutBefore})
		s.advance(modelRetryAfter)
	}
	s.run(charges.ReleaseHoldArgs{}.Kind(), answers{})
	require.Empty(t, s.liveHolds(), "the hold is voided once the gateway answers")
	require.NotNil(t, s.charges(id)[0].HoldReleasedAt)
}

// Minimal sequence: a charge goes to review while its
// authorization is live; its hold check's worker crashes on each of the
// job's River attempts (a process dying mid-job, or a panic in the release
// path). River discarded the job, and nothing released the hold: the
// scan's sweep of discarded jobs covered authorize, capture, void and
// reconcile only, and a hold check is unique per attempt for ever, so it
// could not be enqueued again. The scan now has River run a discarded
// hold check again (at most every ten minutes) while its hold is not
// released.
func TestDiscardedHoldCheckStillReleasesTheHold(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.reviewWithHold(id)
	for range modelMaxAttempts {
		out := s.run(charges.ReleaseHoldArgs{}.Kind(), answers{lookup: faultCrashBefore})
		require.ErrorIs(t, out.err, errCrashed)
		s.advance(modelRetryAfter)
	}
	s.scan()
	for {
		jobs, err := s.w.runnable(s.ctx, nil)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		s.run(jobs[0].kind, answers{})
	}
	require.Empty(t, s.liveHolds(), "the hold is voided once the gateway answers")
}

// Found by the chaos soak (seed 300): seven weekly periods of an active
// subscription were never charged. Minimal sequence: a daily subscription's
// first charge goes to review; the clock moves three days and, before the
// scan reaches the periods that began meanwhile, a person resolves the
// charge as failed. The subscription became unpaid as of the resolution,
// and nothing charges an unpaid subscription's periods: those that began
// while it was still active were lost (and a later recovery skips every
// period that has begun). They are owed: the end of dunning now charges
// them first.
func TestPeriodsBeforeTheEndOfDunningAreChargedWhenTheScanLagged(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	c := s.reviewWithHold(id)
	s.advance(3 * 24 * time.Hour) // no scan: it lags behind
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ResolveCharge(s.ctx, tx, staff, c.ID, charges.Resolution{Outcome: charges.Failed,
			Evidence: "fake ledger: no capture under " + c.GatewayKey(gateway.OpCapture), Actor: "support"})
		return err
	}))
	require.Equal(t, subscriptions.Unpaid, s.sub(id).Status)
	require.Equal(t, []string{"2027-01-30", "2027-01-31", "2027-02-01", "2027-02-02"}, s.periodKeys(id),
		"the periods that began while it was active are charged")
	s.scan()
	require.Len(t, s.periodKeys(id), 4, "and none that begins while unpaid")
}

// Found by TestModel (seed 4075221517044812439) in CI. Minimal sequence: a
// daily subscription's first attempt is declined for good, so it was
// unpaid as of that attempt's due time, which is its period's start;
// support retries the charge; the customer gives a new card. The card
// change voided the retried charge as "began while unpaid" and made the
// subscription active: the one period it owed was never charged. The
// dunning of a period ends after the period began (renewals.DunningEnd).
func TestPeriodThatMadeTheSubscriptionUnpaidStaysOwed(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	sub := s.sub(id)
	require.Equal(t, subscriptions.Unpaid, sub.Status)
	first := s.charges(id)[0]
	require.True(t, sub.UnpaidSince.After(first.PeriodStart), "unpaid just after the period it was collecting began")
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.RetryCharge(s.ctx, tx, staff, first.ID)
		return err
	}))
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ChangePaymentMethod(s.ctx, tx, staff, id, card("tok_2"))
		return err
	}))
	c := s.charges(id)[0]
	require.Equal(t, charges.Scheduled, c.Status, "the retried charge is still owed (%s)", c.FailureCode)
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
	s.pay()
	require.Equal(t, charges.Succeeded, s.charges(id)[0].Status)
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
	require.Len(t, s.w.gw.view().captures()[c.Key()], 1, "one capture for the period")
}

// The same period retried by support while the subscription is still
// unpaid, with no new card, and declined again: the charge fails and waits
// for a new card. It was voided as not owed, so the card change that
// followed had nothing to retry and the period was never charged.
func TestDeclinedRetryOfThePeriodThatMadeTheSubscriptionUnpaidWaitsForACard(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Day, "tok_1")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.RetryCharge(s.ctx, tx, staff, s.charges(id)[0].ID)
		return err
	}))
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictSoftDecline})
	c := s.charges(id)[0]
	require.Equal(t, charges.Failed, c.Status, "%s", c.FailureCode)
	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ChangePaymentMethod(s.ctx, tx, staff, id, card("tok_2"))
		return err
	}))
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
	s.pay()
	c = s.charges(id)[0]
	require.Equal(t, charges.Succeeded, c.Status)
	require.Len(t, s.w.gw.view().captures()[c.Key()], 1)
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
}
