package autopay_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
)

// A housing bill its source reports paid outside rebill is not paid
// again: in part, what is charged on its pay day is the rest; in full, it
// is paid_elsewhere and never charged; and once its charge waits, a later
// report reprices or voids that charge.
func TestHousingBillItsSourceReportsPaidIsNotPaidAgain(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	s.autopay.Sources = map[enrollments.Kind]autopay.BillSource{enrollments.Housing: s.autopay.Sources[enrollments.Fines]}
	e := s.enrol(t, housingOf("cus_1", "75ДА533315", 10, 1000000))
	bill := func(id string, paid int64) billsource.Bill {
		return billsource.Bill{BillID: id, Account: billsource.Account{ELS: "75ДА533315"}, Amount: 100000,
			IssuedAt: start, DueDate: "2027-03-25", PaidAmount: paid}
	}
	s.fake.Publish(bill("H-1", 0))
	s.fake.Publish(bill("H-2", 100000))
	require.Equal(t, 2, s.pull(t))
	require.Equal(t, enrollments.BillScheduled, s.bill(t, e, "H-1").Status)
	paidElsewhere := s.bill(t, e, "H-2")
	require.Equal(t, enrollments.BillPaidElsewhere, paidElsewhere.Status)
	require.Equal(t, int64(100000), paidElsewhere.PaidOutside)

	// The source reports part of H-1 paid at a bank (a re-read finds it).
	s.clock.Advance(time.Minute)
	s.fake.Publish(bill("H-1", 30000))
	s.pull(t)
	partly := s.bill(t, e, "H-1")
	require.Equal(t, enrollments.BillScheduled, partly.Status)
	require.Equal(t, int64(70000), partly.AmountDue(s.clock.Now()))

	s.clock.Set(date(t, "2027-03-10").Start())
	s.scan(t)
	c := s.charge(t, s.bill(t, e, "H-1"))
	require.Equal(t, int64(70000), c.Amount, "the rest is charged")
	require.Equal(t, 1, s.charges(t), "H-2 is never charged")

	// The charge waits (its authorize not yet run): a report of more paid
	// reprices it; one of the whole voids it.
	s.clock.Advance(time.Minute)
	s.fake.Publish(bill("H-1", 50000))
	s.pull(t)
	require.Equal(t, int64(50000), s.charge(t, s.bill(t, e, "H-1")).Amount)
	s.clock.Advance(time.Minute)
	s.fake.Publish(bill("H-1", 100000))
	s.pull(t)
	done := s.bill(t, e, "H-1")
	require.Equal(t, enrollments.BillPaidElsewhere, done.Status)
	voided := s.charge(t, done)
	require.Equal(t, charges.Voided, voided.Status)
	require.Equal(t, charges.FailurePaidElsewhere, voided.FailureCode)
}

// copies returns the enrollments' copies of billID: the one being paid
// (or paid) and the duplicate, whichever enrollment's came first.
func (s *sourceBundle) copies(t *testing.T, a, b enrollments.Enrollment, billID string) (paying, duplicate enrollments.Bill) {
	t.Helper()
	x, y := s.bill(t, a, billID), s.bill(t, b, billID)
	if x.Status == enrollments.BillDuplicate {
		x, y = y, x
	}
	require.Equal(t, enrollments.BillDuplicate, y.Status)
	return x, y
}

// captured records that the charge of bill captured its amount and the
// bill is paid, as the pipeline's capture would.
func (s *sourceBundle) captured(t *testing.T, bill enrollments.Bill) {
	t.Helper()
	ctx := context.Background()
	c := s.charge(t, bill)
	_, err := s.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded' WHERE id = $1`, c.ID)
	require.NoError(t, err)
	s.inTx(t, func(tx pgx.Tx) error { _, err := s.outcomes.ChargePaid(ctx, tx, s.charge(t, bill), false); return err })
}

// A housing source reports what the supplier received, rebill's own
// payments included. A paid_amount that is rebill's own capture of the
// bill (through another enrollment's copy) is not paid elsewhere: the
// copy stays a duplicate, nothing else changes. With part paid outside
// first and the rest captured by rebill, only the outside part counts.
func TestHousingSourcePaidAmountLessRebillsOwnCaptures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		outsidePaid int64
	}{
		{"all of it rebill's own", 0},
		{"part outside, the rest rebill's own", 30000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setupSource(t, time.Hour, 50)
			s.autopay.Sources = map[enrollments.Kind]autopay.BillSource{enrollments.Housing: s.autopay.Sources[enrollments.Fines]}
			first := s.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000000))
			second := s.enrol(t, housingOf("cus_2", "75ДА533315", 0, 1000000))
			bill := func(paid int64) billsource.Bill {
				return billsource.Bill{BillID: "H-1", Account: billsource.Account{ELS: "75ДА533315"}, Amount: 100000,
					IssuedAt: start, DueDate: "2027-03-25", PaidAmount: paid, PaymentDocumentID: "75ДА533315-01-6011"}
			}
			s.fake.Publish(bill(tc.outsidePaid))
			s.pull(t)
			paying, _ := s.copies(t, first, second, "H-1")
			require.Equal(t, enrollments.BillPaying, paying.Status)
			own := s.charge(t, paying).Amount
			require.Equal(t, 100000-tc.outsidePaid, own, "rebill charges what was not paid outside")
			s.captured(t, paying)
			paid, dup := s.copies(t, first, second, "H-1")
			require.Equal(t, enrollments.BillPaid, paid.Status)
			events := len(s.events.of("H-1"))

			// The supplier reports the whole bill paid: the outside part and
			// rebill's own capture.
			s.clock.Advance(time.Minute)
			s.fake.Publish(bill(tc.outsidePaid + own))
			s.pull(t)
			paidAfter, dupAfter := s.copies(t, first, second, "H-1")
			require.Equal(t, enrollments.BillDuplicate, dupAfter.Status, "rebill's own capture is not paid elsewhere")
			require.Equal(t, tc.outsidePaid, dupAfter.PaidOutside, "only the outside part counts")
			require.Equal(t, dup.PaidOutside, dupAfter.PaidOutside)
			require.Equal(t, paid.Status, paidAfter.Status)
			require.Equal(t, paid.PaidOutside, paidAfter.PaidOutside)
			require.Equal(t, 1, s.charges(t))
			require.Len(t, s.events.of("H-1"), events, "no event")
		})
	}
}

// While another enrollment's copy's charge may hold money (its capture
// under way), what the source reports may be that very payment: the
// duplicate copy is left as it is, and a later pull reports it again.
func TestHousingSourcePaidWhileACopysCaptureIsUnderWayIsLeft(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	s.autopay.Sources = map[enrollments.Kind]autopay.BillSource{enrollments.Housing: s.autopay.Sources[enrollments.Fines]}
	first := s.enrol(t, housingOf("cus_1", "75ДА533315", 0, 1000000))
	second := s.enrol(t, housingOf("cus_2", "75ДА533315", 0, 1000000))
	bill := func(paid int64) billsource.Bill {
		return billsource.Bill{BillID: "H-1", Account: billsource.Account{ELS: "75ДА533315"}, Amount: 100000,
			IssuedAt: start, DueDate: "2027-03-25", PaidAmount: paid}
	}
	s.fake.Publish(bill(0))
	s.pull(t)
	paying, _ := s.copies(t, first, second, "H-1")
	_, err := s.pool.Exec(context.Background(), `UPDATE charges SET status = 'capturing' WHERE id = $1`, *paying.ChargeID)
	require.NoError(t, err)
	s.clock.Advance(time.Minute)
	s.fake.Publish(bill(100000))
	s.pull(t)
	stillPaying, dup := s.copies(t, first, second, "H-1")
	require.Equal(t, enrollments.BillPaying, stillPaying.Status)
	require.Zero(t, dup.PaidOutside)
}
