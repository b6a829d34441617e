package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
)

// uin makes a valid 20-digit traffic police UIN (188...) from n.
func uin(n int) string {
	body := fmt.Sprintf("188%016d", n)
	return body + fmt.Sprint(enrollments.UINCheckDigit(body))
}

// autopayStart puts the dev clock at 2027-03-01 09:00 UTC (12:00 in Moscow).
func (b testBundle) autopayStart(t *testing.T) time.Time {
	t.Helper()
	start := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": start.Format(time.RFC3339)})
	return start
}

func (b testBundle) createFinesEnrollment(t *testing.T, token string, maxAmount int64) string {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-auto", "kind": "fines", "account_ref": map[string]any{"sts": "77УА123456"},
		"currency": "RUB", "max_amount": maxAmount,
		"payment_method": map[string]any{"gateway": "sim1", "token": token, "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
}

func (b testBundle) createHousingEnrollment(t *testing.T, els string, payDay int, maxAmount int64) string {
	t.Helper()
	body := map[string]any{
		"customer_id": "cust-auto", "kind": "housing", "account_ref": els, "currency": "RUB", "max_amount": maxAmount,
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	}
	if payDay != 0 {
		body["pay_day"] = payDay
	}
	return b.call(t, http.MethodPost, "/v1/enrollments", body)["id"].(string)
}

func fine(id string, amount, discounted int64, issued time.Time, deadline, due string) map[string]any {
	return map[string]any{"bill_id": id, "amount": amount, "discounted_amount": discounted,
		"issued_at": issued.Format(time.RFC3339), "discount_deadline": deadline, "due_date": due}
}

func (b testBundle) bills(t *testing.T, enrollment string) []map[string]any {
	t.Helper()
	data := b.call(t, http.MethodGet, "/v1/enrollments/"+enrollment+"/bills?limit=100", nil)["data"].([]any)
	out := make([]map[string]any, len(data))
	for i, d := range data {
		out[i] = d.(map[string]any)
	}
	return out
}

// waitBill waits until the enrollment's bill billID has status.
func (b testBundle) waitBill(t *testing.T, enrollment, billID, status string) map[string]any {
	t.Helper()
	var got map[string]any
	require.Eventually(t, func() bool {
		for _, bill := range b.bills(t, enrollment) {
			if bill["bill_id"] == billID {
				got = bill
				return bill["status"] == status
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "bill %s: %v", billID, func() any { return got })
	return got
}

func (b testBundle) enrollmentCharges(t *testing.T, enrollment string) []map[string]any {
	t.Helper()
	data := b.call(t, http.MethodGet, "/v1/enrollments/"+enrollment+"/charges?limit=100", nil)["data"].([]any)
	out := make([]map[string]any, len(data))
	for i, d := range data {
		out[i] = d.(map[string]any)
	}
	return out
}

// captured lists the amounts of the succeeded captures under chargeKey.
func captured(entries []ledgerEntry, chargeKey string) []int64 {
	var out []int64
	for _, e := range entries {
		if len(e.IdempotencyKey) > len(chargeKey) && e.IdempotencyKey[:len(chargeKey)] == chargeKey &&
			e.Op == "capture" && e.Status == "succeeded" {
			out = append(out, e.Amount)
		}
	}
	return out
}

// A fine that arrives with its discount running is paid on arrival at the
// discounted amount: one hold and one capture of half the fine.
func TestFinePaidAtTheDiscount(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(1)
	status, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(id, 100000, 50000, start.Add(-24*time.Hour), "2027-03-20", "2027-05-09"))
	require.Equal(t, http.StatusCreated, status, "%v", pushed)
	require.EqualValues(t, 50000, pushed["amount_due"])

	bill := b.waitBill(t, enr, id, "paid")
	require.NotNil(t, bill["paid_at"])
	cs := b.enrollmentCharges(t, enr)
	require.Len(t, cs, 1)
	require.Equal(t, enr+":"+id, cs[0]["key"])
	require.Equal(t, enr, cs[0]["enrollment_id"])
	require.Nil(t, cs[0]["subscription_id"])
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(b.ledger(t, "sim1"), enr+":"+id))
}

// A housing bill is paid at the start of its pay day (Moscow), not on
// arrival; the same bill pushed again is the same bill.
func TestHousingBillPaidOnItsPayDay(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createHousingEnrollment(t, "75ДА533315", 10, 1000000)
	body := map[string]any{"bill_id": "ZHKU-2027-02", "amount": 734500, "issued_at": start.Format(time.RFC3339),
		"due_date": "2027-03-25"}
	status, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusCreated, status, "%v", pushed)
	require.Equal(t, "scheduled", pushed["status"])
	require.Equal(t, "2027-03-09T21:00:00Z", pushed["pay_at"], "00:00 on the 10th in Moscow")
	status, again := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, pushed["id"], again["id"])

	b.advance(t, "203h") // 2027-03-09 20:00 UTC: an hour before the pay day
	b.scanNow(t)
	require.Empty(t, b.enrollmentCharges(t, enr), "not before its pay day")
	b.advance(t, "2h")
	bill := b.waitBill(t, enr, "ZHKU-2027-02", "paid")
	require.Equal(t, []int64{734500}, captured(b.ledger(t, "sim1"), enr+":ZHKU-2027-02"))
	paidAt, err := time.Parse(time.RFC3339Nano, bill["paid_at"].(string))
	require.NoError(t, err)
	require.False(t, paidAt.Before(time.Date(2027, 3, 9, 21, 0, 0, 0, time.UTC)))
}

// A bill above max_amount waits for the customer; once confirmed it is
// paid once.
func TestBillAboveTheLimitWaitsForConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 40000)
	id := uin(2)
	_, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Equal(t, "awaiting_confirmation", pushed["status"])
	b.advance(t, "1h")
	b.scanNow(t)
	require.Empty(t, b.enrollmentCharges(t, enr))
	confirmed := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+id+"/confirm", nil)
	require.NotEqual(t, "awaiting_confirmation", confirmed["status"])
	b.waitBill(t, enr, id, "paid")
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+id+"/confirm", nil) // again: unchanged
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
}

// The simulated source's bill, pulled, and the same bill pushed are one
// bill and one charge.
func TestPulledAndPushedBillAreOneCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(3)
	body := fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09")
	published := map[string]any{"account_ref": map[string]any{"sts": "77УА123456"}}
	for k, v := range body {
		published[k] = v
	}
	status, out := b.callStatus(t, http.MethodPost, "/v1/dev/bill-sources/fines/bills", published)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	b.waitBill(t, enr, id, "paid")
	status, again := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusOK, status, "%v", again)
	b.advance(t, "1m") // another pull
	b.scanNow(t)
	require.Len(t, b.bills(t, enr), 1)
	require.Len(t, b.enrollmentCharges(t, enr), 1)
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
}

// Twenty concurrent pushes of one bill (each its own Idempotency-Key):
// one 201, the rest 200 with the same bill, one charge, one capture.
func TestConcurrentPushesOfOneBillMakeOneCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(4)
	body := fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09")
	statuses := make([]int, 20)
	ids := make([]any, 20)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
			statuses[i], ids[i] = status, out["id"]
		}()
	}
	wg.Wait()
	created := 0
	for i, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, s)
		require.Equal(t, ids[0], ids[i])
		if s == http.StatusCreated {
			created++
		}
	}
	require.Equal(t, 1, created)
	b.waitBill(t, enr, id, "paid")
	require.Len(t, b.enrollmentCharges(t, enr), 1)
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
}

// The same bill id with another amount is refused and changes nothing.
func TestBillIDWithOtherContentIsAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createHousingEnrollment(t, "75ДВ000003", 20, 1000000)
	body := map[string]any{"bill_id": "X-1", "amount": 5000, "issued_at": start.Format(time.RFC3339), "due_date": "2027-04-15"}
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	body["amount"] = 6000
	status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "https://rebill.dev/problems/bill-conflict", out["type"])
	require.EqualValues(t, 5000, b.bills(t, enr)[0]["amount"])
}

// A paused enrollment keeps its bills pending and pays nothing until it is
// resumed; a cancelled one takes no bills.
func TestPausedEnrollmentPaysNothingUntilResumed(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/pause", nil)
	again := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/pause", nil)
	require.Equal(t, "paused", again["status"])
	id := uin(5)
	_, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Equal(t, "pending", pushed["status"])
	b.advance(t, "48h")
	b.scanNow(t)
	require.Empty(t, b.enrollmentCharges(t, enr))
	require.Equal(t, "active", b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/resume", nil)["status"])
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))

	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/cancel", nil)
	status, _ := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(uin(6), 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Equal(t, http.StatusConflict, status)
}

// The discount is missed because of soft declines: dunning is compressed
// before the deadline, then continues at the full amount with new keys;
// after a card change the fine is paid in full, and never at both prices.
func TestDiscountMissedThenPaidInFullAfterACardChange(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t) // 2027-03-01 12:00 in Moscow
	enr := b.createFinesEnrollment(t, "tok_decline_funds", 500000)
	id := uin(7)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
		fine(id, 100000, 50000, start.Add(-19*24*time.Hour), "2027-03-02", "2027-05-09"))
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return len(cs) == 1 && cs[0]["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond)
	c := b.enrollmentCharges(t, enr)[0]
	next, err := time.Parse(time.RFC3339Nano, c["next_attempt_at"].(string))
	require.NoError(t, err)
	deadline := time.Date(2027, 3, 2, 21, 0, 0, 0, time.UTC) // the end of 2 March in Moscow
	require.True(t, next.Before(deadline.Add(-time.Hour)), "dunning compressed before the deadline: %s", next)

	b.advance(t, "40h") // past the deadline: every discounted retry ran, then a full one
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, enr)
		return cs[0]["status"] == "declined" && cs[0]["amount"] == float64(100000)
	}, 20*time.Second, 50*time.Millisecond, "the attempt after the deadline is at the full amount")
	require.Equal(t, float64(100000), b.bills(t, enr)[0]["amount_due"])

	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/payment-method",
		map[string]any{"gateway": "sim1", "token": "tok_ok_new", "exp_month": 1, "exp_year": 2036})
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{100000}, captured(b.ledger(t, "sim1"), key), "one capture, at the full amount")
	for _, e := range b.ledger(t, "sim1") {
		if e.Op == "authorize" && e.Status == "succeeded" && len(e.IdempotencyKey) > len(key) && e.IdempotencyKey[:len(key)] == key {
			require.EqualValues(t, 100000, e.Amount, "no discounted hold was placed after the deadline")
		}
	}
}

// Bad identifiers and amounts are refused with field errors, and nothing
// is written.
func TestBadEnrollmentsAndBillsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	pm := map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035}
	for name, tc := range map[string]struct {
		body  map[string]any
		field string
	}{
		"short ELS":         {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": "12345", "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref"},
		"letters misplaced": {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": "12345678УА", "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref"},
		"short STS":         {map[string]any{"customer_id": "c", "kind": "fines", "account_ref": map[string]any{"sts": "77уа1234"}, "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref.sts"},
		"short licence":     {map[string]any{"customer_id": "c", "kind": "fines", "account_ref": map[string]any{"driver_license": "77123"}, "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref.driver_license"},
		"fines by ELS":      {map[string]any{"customer_id": "c", "kind": "fines", "account_ref": "1234567890", "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref"},
		"housing by STS":    {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": map[string]any{"sts": "77УА123456"}, "currency": "RUB", "max_amount": 1, "payment_method": pm}, "account_ref"},
		"USD":               {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": "75ДА533315", "currency": "USD", "max_amount": 1, "payment_method": pm}, "currency"},
		"zero max_amount":   {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 0, "payment_method": pm}, "max_amount"},
		"pay_day 29":        {map[string]any{"customer_id": "c", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 1, "pay_day": 29, "payment_method": pm}, "pay_day"},
		"pay_day on fines":  {map[string]any{"customer_id": "c", "kind": "fines", "account_ref": map[string]any{"sts": "77УА123456"}, "currency": "RUB", "max_amount": 1, "pay_day": 5, "payment_method": pm}, "pay_day"},
	} {
		status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments", tc.body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Contains(t, fieldsOf(out), tc.field, name)
	}
	require.Empty(t, b.call(t, http.MethodGet, "/v1/enrollments", nil)["data"])

	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	good := uin(8)
	badCheck := good[:19] + fmt.Sprint((int(good[19]-'0')+1)%10)
	for name, tc := range map[string]struct {
		body  map[string]any
		field string
	}{
		"bad check digit":     {fine(badCheck, 100000, 50000, start, "2027-03-20", "2027-05-09"), "bill_id"},
		"19 digits":           {fine(good[:19], 100000, 50000, start, "2027-03-20", "2027-05-09"), "bill_id"},
		"zero amount":         {fine(good, 0, 50000, start, "2027-03-20", "2027-05-09"), "amount"},
		"discount above":      {fine(good, 100000, 150000, start, "2027-03-20", "2027-05-09"), "discounted_amount"},
		"deadline after due":  {fine(good, 100000, 50000, start, "2027-06-20", "2027-05-09"), "discount_deadline"},
		"bad due date":        {fine(good, 100000, 50000, start, "2027-03-20", "09.05.2027"), "due_date"},
		"due before issuance": {fine(good, 100000, 50000, start, "2027-03-20", "2027-02-01"), "due_date"},
	} {
		status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", tc.body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Contains(t, fieldsOf(out), tc.field, name)
	}
	require.Empty(t, b.bills(t, enr))
	require.Empty(t, b.enrollmentCharges(t, enr))
}

func fieldsOf(problem map[string]any) []string {
	var out []string
	errs, _ := problem["errors"].([]any)
	for _, e := range errs {
		out = append(out, e.(map[string]any)["field"].(string))
	}
	return out
}

// callAs is callStatus with another API key.
func (b testBundle) callAs(t *testing.T, key, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.url()+path, reader)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if method == http.MethodPost {
		keySeq++
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-as-%d-%d", t.Name(), keySeq, time.Now().UnixNano()))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// A customer key sees and changes only its own enrollments and bills (404
// for another's), cannot enrol another customer (403), and cannot push or
// withdraw bills (403: the integration's).
func TestCustomerKeysReachOnlyTheirOwnEnrollments(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	keyFor := func(customer string) string {
		return b.call(t, http.MethodPost, "/v1/api-keys", map[string]any{"role": "customer", "customer_id": customer})["key"].(string)
	}
	alice, mallory := keyFor("cust-alice"), keyFor("cust-mallory")
	pm := map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035}
	status, enr := b.callAs(t, alice, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-alice", "kind": "fines", "account_ref": map[string]any{"driver_license": "7712345678"},
		"currency": "RUB", "max_amount": 10000, "payment_method": pm})
	require.Equal(t, http.StatusCreated, status, "%v", enr)
	id := enr["id"].(string)

	status, _ = b.callAs(t, alice, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-mallory", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 1,
		"payment_method": pm})
	require.Equal(t, http.StatusForbidden, status, "enrolling another customer")
	status, _ = b.callAs(t, alice, http.MethodGet, "/v1/enrollments?customer_id=cust-mallory", nil)
	require.Equal(t, http.StatusForbidden, status)
	status, _ = b.callAs(t, alice, http.MethodPost, "/v1/enrollments/"+id+"/bills",
		fine(uin(20), 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Equal(t, http.StatusForbidden, status, "bills are pushed by the integration")

	for _, path := range []string{"/v1/enrollments/" + id, "/v1/enrollments/" + id + "/bills", "/v1/enrollments/" + id + "/charges"} {
		status, _ = b.callAs(t, mallory, http.MethodGet, path, nil)
		require.Equal(t, http.StatusNotFound, status, path)
	}
	for _, action := range []string{"pause", "cancel"} {
		status, _ = b.callAs(t, mallory, http.MethodPost, "/v1/enrollments/"+id+"/"+action, nil)
		require.Equal(t, http.StatusNotFound, status, action)
	}
	status, _ = b.callAs(t, mallory, http.MethodPost, "/v1/enrollments/"+id+"/payment-method", pm)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "active", b.call(t, http.MethodGet, "/v1/enrollments/"+id, nil)["status"], "nothing changed")

	// Above her limit, the fine waits for Alice, not for Mallory.
	fineID := uin(21)
	b.call(t, http.MethodPost, "/v1/enrollments/"+id+"/bills", fine(fineID, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	status, _ = b.callAs(t, mallory, http.MethodPost, "/v1/enrollments/"+id+"/bills/"+fineID+"/confirm", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "awaiting_confirmation", b.bills(t, id)[0]["status"])
	status, _ = b.callAs(t, alice, http.MethodPost, "/v1/enrollments/"+id+"/bills/"+fineID+"/confirm", nil)
	require.Equal(t, http.StatusOK, status)
	b.waitBill(t, id, fineID, "paid")
	status, list := b.callAs(t, alice, http.MethodGet, "/v1/enrollments", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["data"], 1)
}
