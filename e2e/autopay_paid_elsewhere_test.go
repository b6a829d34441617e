package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A fine paid in full at a bank is never held by rebill: the bill is
// paid_elsewhere and the registry's book holds only the bank's payment.
// One paid in part is held, posted and captured for the rest, so that the
// book adds up to the price.
func TestFinePaidElsewhereIsNotPaidAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)

	full := uin(31)
	paid := b.call(t, http.MethodPost, "/v1/dev/registry/paid", map[string]any{"uin": full, "amount": 50000})
	require.Equal(t, "outside", paid["gateway"])
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(full, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	bill := b.waitBill(t, enr, full, "paid_elsewhere")
	require.EqualValues(t, 50000, bill["paid_elsewhere_amount"])
	require.EqualValues(t, 0, bill["amount_due"])
	require.Empty(t, opsFor(b.ledger(t, "sim1"), enr+":"+full), "nothing is held or captured")
	book := b.registryLedger(t, full)
	require.Len(t, book, 1, "the registry holds only the bank's payment")
	require.Equal(t, "outside", book[0].Gateway)
	charges := b.enrollmentCharges(t, enr)
	require.Len(t, charges, 1)
	require.Equal(t, "voided", charges[0]["status"])
	require.Equal(t, "paid_elsewhere", charges[0]["failure_code"])

	part := uin(32)
	b.call(t, http.MethodPost, "/v1/dev/registry/paid", map[string]any{"uin": part, "amount": 20000})
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(part, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	bill = b.waitBill(t, enr, part, "paid")
	require.EqualValues(t, 20000, bill["paid_elsewhere_amount"])
	require.Equal(t, []int64{30000}, captured(b.ledger(t, "sim1"), enr+":"+part), "the rest of the discounted price")
	var total int64
	for _, e := range b.registryLedger(t, part) {
		require.Equal(t, "accepted", e.Status)
		total += e.Amount
	}
	require.EqualValues(t, 50000, total, "the book adds up to the discounted price")
}

// A registry that cannot say what was paid elsewhere delays the hold:
// nothing is sent to the gateway until it answers.
func TestFineWaitsForTheRegistryBeforeItsHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": true})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": true})
	id := uin(33)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["failure_code"] == "registry_unavailable"
	}, 30*time.Second, 20*time.Millisecond, "the attempt waits for the registry")
	require.Empty(t, opsFor(b.ledger(t, "sim1"), enr+":"+id), "never held blind")

	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": false})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": false})
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
}

// Only staff record payments made outside rebill, and a bad UIN or amount
// is refused naming the field, recording nothing.
func TestRecordingAPaymentOutsideRebillIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	status, body := b.callStatus(t, http.MethodPost, "/v1/dev/registry/paid", map[string]any{"uin": "123", "amount": 0})
	require.Equal(t, http.StatusBadRequest, status)
	fields := map[string]bool{}
	for _, e := range body["errors"].([]any) {
		fields[e.(map[string]any)["field"].(string)] = true
	}
	require.Equal(t, map[string]bool{"uin": true, "amount": true}, fields)
	require.Empty(t, b.registryLedger(t, "123"))
}

// A fine's hold that lapses before its capture is released and held
// again, but only once the old attempt's accepted posting is annulled:
// while the registry is down the new attempt waits, holding nothing (a
// second hold could end as a second payment of one fine); once it is back
// the old payment is annulled, the new hold placed and posted at the
// discount, and the fine captured once.
func TestLapsedFineHoldIsPostedAgainOnlyAfterItsPostingIsAnnulled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"captures_down": true})
	id := uin(34)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		book := b.registryLedger(t, id)
		return len(book) == 1 && book[0].Status == "accepted"
	}, 30*time.Second, 20*time.Millisecond, "held and posted; the capture cannot be made")
	first := b.registryLedger(t, id)[0].PaymentID

	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": true})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": true})
	b.advance(t, "167h") // the hold lapses within the hour: it is released, and the new attempt waits
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["status"] == "scheduled" && cs[0]["attempt_count"] == float64(2) &&
			cs[0]["failure_code"] == "hold_expired" && cs[0]["next_attempt_at"] != nil
	}, 30*time.Second, 20*time.Millisecond, "the new attempt waits for the old posting's annulment")
	require.Equal(t, 1, opsFor(b.ledger(t, "sim1"), key)["authorize:succeeded"], "no second hold while the old payment stands")
	require.Len(t, b.registryLedger(t, id), 1, "nothing is posted while the registry is down")

	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"captures_down": false})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": false})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": false})
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), key), "captured once, at the discount")
	require.Equal(t, 2, opsFor(b.ledger(t, "sim1"), key)["authorize:succeeded"])
	book := b.registryLedger(t, id)
	require.Len(t, book, 2)
	standing := 0
	for _, e := range book {
		if e.PaymentID == first {
			require.Equal(t, "annulled", e.Status, "the lapsed attempt's posting is annulled")
		}
		if e.Status == "accepted" {
			standing++
		}
	}
	require.Equal(t, 1, standing, "one payment stands at the registry")
}

// A fine paid elsewhere at its discount before the deadline is paid, even
// when rebill can only ask after the deadline (the registry was down), when
// the discounted amount no longer covers the price: the registry judges it
// settled, and nothing is charged.
func TestFinePaidAtItsDiscountElsewhereIsSettledWheneverRebillAsks(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(35)
	b.call(t, http.MethodPost, "/v1/dev/registry/paid", map[string]any{"uin": id, "amount": 50000})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": true})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": true})
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["failure_code"] == "registry_unavailable"
	}, 30*time.Second, 20*time.Millisecond, "the attempt waits for the registry")
	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2027-03-22T09:00:00Z"}) // past the deadline
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": false})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"down": false})
	b.waitBill(t, enr, id, "paid_elsewhere")
	require.Empty(t, opsFor(b.ledger(t, "sim1"), enr+":"+id), "the other half is never charged")
}
