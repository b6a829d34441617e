package autopay_test

import (
	"testing"
	"time"

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
