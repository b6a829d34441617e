package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (b testBundle) eventTypes(t *testing.T, enrollment string) []string {
	t.Helper()
	events := b.call(t, http.MethodGet, "/v1/events?object_id="+enrollment+"&limit=100", nil)["data"].([]any)
	var types []string
	for _, e := range events {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	return types
}

// authorized lists the amounts of the authorizes sent under chargeKey.
func authorized(entries []ledgerEntry, chargeKey string) []int64 {
	var out []int64
	for _, e := range entries {
		if len(e.IdempotencyKey) > len(chargeKey) && e.IdempotencyKey[:len(chargeKey)] == chargeKey && e.Op == "authorize" {
			out = append(out, e.Amount)
		}
	}
	return out
}

// The cap holds at a fine's full price: max_amount 60000, the discounted
// 50000 declined until the deadline, then the full 100000 is not tried
// (not on the old card, not after a card change) until the customer
// confirms it; the bill shows awaiting_confirmation with its event, and
// once confirmed the fine is paid once, at the amount confirmed.
func TestFineAboveTheCapAtTheFullPriceWaitsForConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t) // 2027-03-01 12:00 in Moscow
	enr := b.createFinesEnrollment(t, "tok_decline_funds", 60000)
	id := uin(31)
	_, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(id, 100000, 50000, start.Add(-19*24*time.Hour), "2027-03-02", "2027-05-09"))
	require.Equal(t, "paying", pushed["status"])
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond)

	b.advance(t, "40h") // past the deadline: the discounted retries ran and were declined
	bill := b.waitBill(t, enr, id, "awaiting_confirmation")
	require.EqualValues(t, 100000, bill["amount_due"])
	cs := b.enrollmentCharges(t, enr)
	require.Len(t, cs, 1)
	require.Equal(t, "scheduled", cs[0]["status"])
	require.Equal(t, true, cs[0]["confirmation_required"])
	for _, amount := range authorized(b.ledger(t, "sim1"), key) {
		require.EqualValues(t, 50000, amount, "no authorize above the cap")
	}
	require.Contains(t, b.eventTypes(t, enr), "bill.awaiting_confirmation")

	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/payment-method",
		map[string]any{"gateway": "sim1", "token": "tok_ok_new", "exp_month": 1, "exp_year": 2036})
	b.advance(t, "1m")
	b.scanNow(t)
	require.Equal(t, "awaiting_confirmation", b.bills(t, enr)[0]["status"], "a card change is no confirmation")
	require.Empty(t, captured(b.ledger(t, "sim1"), key))
	for _, amount := range authorized(b.ledger(t, "sim1"), key) {
		require.EqualValues(t, 50000, amount, "no authorize above the cap")
	}

	confirmed := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+id+"/confirm", nil)
	require.EqualValues(t, 100000, confirmed["confirmed_amount"])
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{100000}, captured(b.ledger(t, "sim1"), key), "paid once, at the amount confirmed")
}

// Bills past their last moment to start an attempt (expires_at less an
// hour) are stored expired on arrival, with bill.received and
// bill.expired, and never charged: a housing bill due nine days earlier,
// and a fine past its expires_at.
func TestBillArrivingPastItsLastMomentIsStoredExpired(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t) // 2027-03-01
	housing := b.createHousingEnrollment(t, "76ДД234567", 0, 1000000)
	status, late := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "LATE-1", "amount": 5000, "issued_at": start.Add(-40 * 24 * time.Hour).Format(time.RFC3339),
		"due_date": "2027-02-20"})
	require.Equal(t, http.StatusCreated, status, "%v", late)
	require.Equal(t, "expired", late["status"])

	fines := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(32)
	status, old := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+fines+"/bills",
		fine(id, 100000, 50000, start.Add(-90*24*time.Hour), "2026-12-20", "2027-01-30"))
	require.Equal(t, http.StatusCreated, status, "%v", old)
	require.Equal(t, "expired", old["status"])

	b.advance(t, "1m")
	b.scanNow(t)
	require.Empty(t, b.enrollmentCharges(t, housing))
	require.Empty(t, b.enrollmentCharges(t, fines))
	require.Empty(t, opsFor(b.ledger(t, "sim1"), housing+":LATE-1"))
	require.Empty(t, opsFor(b.ledger(t, "sim1"), fines+":"+id))
	for _, enr := range []string{housing, fines} {
		require.Subset(t, b.eventTypes(t, enr), []string{"bill.received", "bill.expired"})
	}
}

// A paid fine's amount_due stays what was captured after its discount
// ends; a withdrawn bill's voided charge names the withdrawal.
func TestPaidFineKeepsItsAmountAndWithdrawalNamesItsReason(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(33)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-02", "2027-05-09"))
	b.waitBill(t, enr, id, "paid")
	b.advance(t, "72h") // past the discount deadline
	require.EqualValues(t, 50000, b.bills(t, enr)[0]["amount_due"], "what was paid")

	housing := b.createHousingEnrollment(t, "76ДЕ234567", 20, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "W-2", "amount": 5000, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-05-15"})
	b.advance(t, "480h") // its pay day: charged
	b.scanNow(t)
	require.Eventually(t, func() bool { return len(b.enrollmentCharges(t, housing)) == 1 }, 20*time.Second, 50*time.Millisecond)
	b.waitBill(t, housing, "W-2", "paid")

	declining := b.createHousingEnrollment(t, "76ДЖ234567", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+declining+"/payment-method",
		map[string]any{"gateway": "sim1", "token": "tok_decline_funds", "exp_month": 1, "exp_year": 2036})
	b.call(t, http.MethodPost, "/v1/enrollments/"+declining+"/bills", map[string]any{
		"bill_id": "W-3", "amount": 5000, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-05-15"})
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, declining)
		return len(cs) == 1 && cs[0]["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond)
	b.call(t, http.MethodPost, "/v1/enrollments/"+declining+"/bills/W-3/withdraw", nil)
	cs := b.enrollmentCharges(t, declining)
	require.Equal(t, "voided", cs[0]["status"])
	require.Equal(t, "bill_withdrawn", cs[0]["failure_code"])
}
