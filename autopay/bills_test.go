package autopay_test

// The rules of bills, specified on autopay over a real database: when a
// bill is charged, for how much, what keeps it from being charged, and
// what a repeat of it is. The jobs are asserted as enqueued (the
// charges pipeline that runs them has tests of its own).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/fsm"
)

// A fine that arrives with its discount running is charged on arrival at
// the discounted amount, priced at the full amount from the deadline on,
// under its UIN (posted to the registry before its capture) and its
// identity; its authorize job is enqueued with it.
func TestFineIsChargedOnArrivalAtTheDiscount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, finesOf("cus_1", "77УА123456", 500000))
	id := uin(1)
	bill := b.mustPush(t, e, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))

	require.Equal(t, enrollments.BillPaying, bill.Status)
	require.True(t, bill.PayAt.Equal(start), "paid on arrival")
	c := b.charge(t, bill)
	require.EqualValues(t, 50000, c.Amount)
	require.EqualValues(t, 100000, c.FullAmount)
	require.NotNil(t, c.DiscountUntil)
	require.True(t, c.DiscountUntil.Equal(date(t, "2027-03-20").End()), "the discount ends with its deadline's day in Moscow")
	require.Equal(t, id, c.RegistryUIN)
	require.Equal(t, "uin:"+id, bill.Identity)
	job := rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.AuthorizeArgs{}, nil)
	require.Equal(t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, job.Args)
}

// A housing bill is charged at the start of its pay day in Moscow, by the
// scan, once however often the scan runs.
func TestHousingBillIsChargedOnItsPayDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 10, 1000000))
	bill := b.mustPush(t, e, housing(t, "H-1", 1000, "2027-03-25"))
	payDay := date(t, "2027-03-10").Start()
	require.Equal(t, enrollments.BillScheduled, bill.Status)
	require.True(t, bill.PayAt.Equal(payDay), "pay_at %s", bill.PayAt)
	rivertest.RequireNotInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.AuthorizeArgs{}, nil)

	b.clock.Set(payDay.Add(-time.Second))
	require.Zero(t, b.scan(t).Charged, "not before its pay day")
	require.Zero(t, b.charges(t))

	b.clock.Set(payDay)
	require.Equal(t, 1, b.scan(t).Charged)
	b.scan(t)
	bill = b.bill(t, e, "H-1")
	require.Equal(t, enrollments.BillPaying, bill.Status)
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, []any{b.charge(t, bill).ID}, anys(b.authorizeJobs(t)))
}

// A pay day closer to the due date than the dunning room is replaced by
// the due date's end less the room, so that the whole dunning fits.
func TestPayDayTooCloseToTheDueDatePaysAtTheLatestMoment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 25, 1000000))
	bill := b.mustPush(t, e, housing(t, "H-1", 1000, "2027-03-25"))
	require.True(t, bill.PayAt.Equal(date(t, "2027-03-25").End().Add(-7*24*time.Hour)), "pay_at %s", bill.PayAt)
}

// A bill whose amount due is above max_amount waits for the customer's
// confirmation and is not charged, whatever the scan finds; once
// confirmed it is charged at once, with the confirmed amount as its cap.
func TestBillAboveTheCapWaitsForConfirmation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000))
	bill := b.mustPush(t, e, housing(t, "H-1", 5000, "2027-03-25"))
	require.Equal(t, enrollments.BillAwaitingConfirmation, bill.Status)
	require.Equal(t, []string{"received", "awaiting_confirmation"}, b.events.of("H-1"))
	require.Zero(t, b.scan(t).Charged)
	require.Zero(t, b.charges(t))

	b.inTx(t, func(tx pgx.Tx) (err error) {
		bill, err = b.autopay.Confirm(ctx, tx, e.ID, "H-1")
		return err
	})
	require.Equal(t, enrollments.BillPaying, bill.Status)
	require.NotNil(t, bill.ConfirmedAmount)
	require.EqualValues(t, 5000, *bill.ConfirmedAmount)
	c := b.charge(t, bill)
	require.EqualValues(t, 5000, c.ConfirmedAmount)
	require.EqualValues(t, 1000, c.MaxAmount)
	require.Equal(t, []any{c.ID}, anys(b.authorizeJobs(t)))
}

// The same bill pushed again is the same bill with the same charge; the
// same bill id with other content is a conflict that changes nothing.
func TestSameBillIsOneBillAndOtherContentAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, finesOf("cus_1", "77УА123456", 500000))
	id := uin(2)
	first := b.mustPush(t, e, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))
	again, created, err := b.push(t, e, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)

	_, _, err = b.push(t, e, fine(t, id, 120000, 50000, "2027-03-20", "2027-05-09"))
	require.ErrorIs(t, err, enrollments.ErrBillConflict)
	require.EqualValues(t, 100000, b.bill(t, e, id).Amount)
	require.Equal(t, 1, b.charges(t))
	require.Len(t, b.authorizeJobs(t), 1)
}

// A paused enrollment keeps its bills pending, due or not; its resume
// charges those whose pay_at passed. A cancelled enrollment takes no
// bills.
func TestPausedEnrollmentKeepsBillsPendingUntilResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000000))
	b.inTx(t, func(tx pgx.Tx) error { _, err := b.autopay.Pause(ctx, tx, e.ID); return err })
	bill := b.mustPush(t, e, housing(t, "H-1", 1000, "2027-03-25"))
	require.Equal(t, enrollments.BillPending, bill.Status)
	require.Zero(t, b.scan(t).Charged)
	require.Zero(t, b.charges(t))

	b.clock.Advance(time.Hour)
	b.inTx(t, func(tx pgx.Tx) error { _, err := b.autopay.Resume(ctx, tx, e.ID); return err })
	bill = b.bill(t, e, "H-1")
	require.Equal(t, enrollments.BillPaying, bill.Status, "charged at the resume")
	require.Equal(t, []any{b.charge(t, bill).ID}, anys(b.authorizeJobs(t)))

	b.inTx(t, func(tx pgx.Tx) error { _, err := b.autopay.Cancel(ctx, tx, e.ID); return err })
	_, _, err := b.push(t, e, housing(t, "H-2", 1000, "2027-03-25"))
	var transition *fsm.TransitionError
	require.True(t, errors.As(err, &transition), "a cancelled enrollment takes no bills: %v", err)
}

// A bill that arrives at or past its last moment to start an attempt is
// stored expired and never charged.
func TestBillArrivingPastItsLastMomentIsStoredExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000000))
	late := housing(t, "H-late", 1000, "2027-02-20")
	late.IssuedAt = start.AddDate(0, -1, 0)
	bill := b.mustPush(t, e, late)
	require.Equal(t, enrollments.BillExpired, bill.Status)
	require.Equal(t, []string{"received", "expired"}, b.events.of("H-late"))

	// Its due date's end less the capture margin: the last moment.
	b.clock.Set(date(t, "2027-03-25").End().Add(-captureMargin))
	edge := b.mustPush(t, e, housing(t, "H-edge", 1000, "2027-03-25"))
	require.Equal(t, enrollments.BillExpired, edge.Status)
	b.scan(t)
	require.Zero(t, b.charges(t))
}

// A bill that could not be paid by its last moment expires at the scan:
// one awaiting a confirmation that never came, for instance.
func TestUnpaidBillExpiresAfterItsLastMoment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000))
	b.mustPush(t, e, housing(t, "H-1", 5000, "2027-03-25"))
	last := date(t, "2027-03-25").End().Add(-captureMargin)

	b.clock.Set(last.Add(-2 * captureMargin))
	require.Zero(t, b.scan(t).Expired)
	b.clock.Set(last.Add(time.Hour))
	require.Equal(t, 1, b.scan(t).Expired)
	require.Equal(t, enrollments.BillExpired, b.bill(t, e, "H-1").Status)
	require.Equal(t, []string{"received", "awaiting_confirmation", "expired"}, b.events.of("H-1"))
}

// Without a payment registry a fine is never charged (it could not be
// posted): it awaits one, and the first scan once one is configured
// charges it.
func TestFineAwaitsARegistry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.autopay.Registry = false
	e := b.enrol(t, finesOf("cus_1", "77УА123456", 500000))
	id := uin(3)
	bill := b.mustPush(t, e, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))
	require.Equal(t, enrollments.BillAwaitingRegistry, bill.Status)
	require.Equal(t, []string{"received", "awaiting_registry"}, b.events.of(id))
	b.scan(t)
	require.Zero(t, b.charges(t))

	b.autopay.Registry = true
	require.Equal(t, 1, b.scan(t).Charged)
	require.Equal(t, enrollments.BillPaying, b.bill(t, e, id).Status)
	require.Equal(t, 1, b.charges(t))
}

// Two customers enrol the same car: the fine is charged once, by the copy
// that came first; the other copy is a duplicate naming the enrollment
// that pays it.
func TestSameFineOfTwoEnrollmentsIsChargedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.enrol(t, finesOf("cus_1", "77УА123456", 500000))
	second := b.enrol(t, finesOf("cus_2", "77УА123456", 500000))
	id := uin(4)
	paying := b.mustPush(t, first, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))
	dup := b.mustPush(t, second, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))

	require.Equal(t, enrollments.BillPaying, paying.Status)
	require.Equal(t, enrollments.BillDuplicate, dup.Status)
	require.NotNil(t, dup.PaidByEnrollmentID)
	require.Equal(t, first.ID, *dup.PaidByEnrollmentID)
	require.Nil(t, dup.ChargeID)
	b.scan(t)
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, []string{"received", "received", "duplicate"}, b.events.of(id), "each copy received, the second a duplicate")
}

// A withdrawn bill is never charged, even once its pay day comes, nor
// confirmed.
func TestWithdrawnBillIsNeverCharged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", "75ДА533315", 10, 1000000))
	b.mustPush(t, e, housing(t, "H-1", 1000, "2027-03-25"))
	var bill enrollments.Bill
	b.inTx(t, func(tx pgx.Tx) (err error) {
		bill, err = b.autopay.Withdraw(ctx, tx, e.ID, "H-1")
		return err
	})
	require.Equal(t, enrollments.BillWithdrawn, bill.Status)
	b.clock.Set(date(t, "2027-03-10").Start())
	require.Zero(t, b.scan(t).Charged)
	require.Zero(t, b.charges(t))
	require.Equal(t, enrollments.BillWithdrawn, b.bill(t, e, "H-1").Status)

	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.autopay.Confirm(ctx, tx, e.ID, "H-1")
		return err
	})
	var transition *fsm.TransitionError
	require.True(t, errors.As(err, &transition), "a withdrawn bill cannot be confirmed: %v", err)
	require.Zero(t, b.charges(t))
}

// A charge's outcome moves its bill: paid at what was captured, or
// failed; a paid bill stays paid.
func TestChargeOutcomesMoveTheBill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, finesOf("cus_1", "77УА123456", 500000))
	paidID, failedID := uin(5), uin(6)
	paid := b.mustPush(t, e, fine(t, paidID, 100000, 50000, "2027-03-20", "2027-05-09"))
	failed := b.mustPush(t, e, fine(t, failedID, 100000, 50000, "2027-03-20", "2027-05-09"))

	b.inTx(t, func(tx pgx.Tx) error { _, err := b.outcomes.ChargePaid(ctx, tx, b.charge(t, paid), false); return err })
	b.inTx(t, func(tx pgx.Tx) error { _, err := b.outcomes.ChargeFailed(ctx, tx, b.charge(t, failed)); return err })
	paid = b.bill(t, e, paidID)
	require.Equal(t, enrollments.BillPaid, paid.Status)
	require.NotNil(t, paid.PaidAmount)
	require.EqualValues(t, 50000, *paid.PaidAmount)
	require.Equal(t, enrollments.BillFailed, b.bill(t, e, failedID).Status)
	require.Equal(t, []string{"received", "paid"}, b.events.of(paidID))
	require.Equal(t, []string{"received", "failed"}, b.events.of(failedID))

	// The paid bill stays paid whatever its charge reports later.
	b.inTx(t, func(tx pgx.Tx) error { _, err := b.outcomes.ChargeFailed(ctx, tx, b.charge(t, paid)); return err })
	require.Equal(t, enrollments.BillPaid, b.bill(t, e, paidID).Status)
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// A fine that arrives after its last discounted start (an hour before its
// discount ends) costs its full amount: its attempt could no longer be
// posted and captured at the discount. The cap applies to that: above
// it, the bill waits for the customer's confirmation, which covers the
// full amount, so that the attempt it starts is not held back again.
func TestFineArrivingInTheLastHourOfItsDiscountIsAtTheFullPrice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.enrol(t, finesOf("cus_1", "77УА123456", 60000))
	ends := date(t, "2027-03-01").End()
	b.clock.Set(ends.Add(-30 * time.Minute))
	id := uin(1)
	bill := b.mustPush(t, e, fine(t, id, 100000, 50000, "2027-03-01", "2027-05-09"))
	require.Equal(t, enrollments.BillAwaitingConfirmation, bill.Status, "the full amount is above the cap")
	require.EqualValues(t, 100000, bill.AmountDue(b.clock.Now()))
	require.Zero(t, b.charges(t))

	b.inTx(t, func(tx pgx.Tx) (err error) {
		bill, err = b.autopay.Confirm(ctx, tx, e.ID, id)
		return err
	})
	require.Equal(t, enrollments.BillPaying, bill.Status)
	require.EqualValues(t, 100000, *bill.ConfirmedAmount, "the confirmation covers the full amount")
	c := b.charge(t, bill)
	require.EqualValues(t, 100000, c.ConfirmedAmount)

	// One second earlier the discount still applies to an attempt.
	b.clock.Set(ends.Add(-charges.PostingDiscountMargin - time.Second))
	other := b.enrol(t, finesOf("cus_2", "77УА654321", 60000))
	bill = b.mustPush(t, other, fine(t, uin(2), 100000, 50000, "2027-03-01", "2027-05-09"))
	require.Equal(t, enrollments.BillPaying, bill.Status)
	require.EqualValues(t, 50000, b.charge(t, bill).Amount)
}
