package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
)

func (b testBundle) enrol(t *testing.T, customer, kind string, ref any, token string) string {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": customer, "kind": kind, "account_ref": ref, "currency": "RUB", "max_amount": 1000000,
		"payment_method": map[string]any{"gateway": "sim1", "token": token, "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
}

// succeededOps counts the succeeded operations op on the gateway's ledger
// under any of the charge keys.
func succeededOps(entries []ledgerEntry, op string, keys ...string) int {
	n := 0
	for _, k := range keys {
		n += opsFor(entries, k)[op+":succeeded"]
	}
	return n
}

// An ELS is stored and echoed in its canonical Cyrillic spelling; a Latin
// letter with no Cyrillic twin is refused saying why. The same customer
// enrolling the same account again, in any spelling, gets 409
// enrollment-exists naming the first enrollment, and that refusal is not
// kept under the Idempotency-Key: once the first is cancelled, the same
// key creates the enrollment.
func TestSameAccountEnrolledTwiceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.autopayStart(t)
	pm := map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035}
	body := func(ref any, kind string) map[string]any {
		return map[string]any{"customer_id": "cust-twice", "kind": kind, "account_ref": ref, "currency": "RUB",
			"max_amount": 100000, "payment_method": pm}
	}
	status, _, first := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "k-1", body("75KA533315", "housing"))
	require.Equal(t, http.StatusCreated, status, "%v", first)
	require.Equal(t, "75КА533315", first["account_ref"], "Latin K and A are stored as the Cyrillic letters")

	status, _, refused := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "k-bad", body("75DA533315", "housing"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, fmt.Sprint(refused["errors"]), "'D'")

	status, _, exists := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "k-2", body("75ка533315", "housing"))
	require.Equal(t, http.StatusConflict, status, "%v", exists)
	require.Equal(t, "https://rebill.dev/problems/enrollment-exists", exists["type"])
	require.Equal(t, first["id"], exists["enrollment_id"])

	fines := b.enrol(t, "cust-twice", "fines", map[string]any{"sts": "77УА123456", "driver_license": "7712345678"}, "tok_ok")
	status, _, exists = b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "k-3",
		body(map[string]any{"driver_license": "7712345678"}, "fines"))
	require.Equal(t, http.StatusConflict, status, "sharing a driving licence is the same enrollment")
	require.Equal(t, fines, exists["enrollment_id"])

	b.call(t, http.MethodPost, "/v1/enrollments/"+first["id"].(string)+"/cancel", nil)
	status, _, again := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "k-2", body("75ка533315", "housing"))
	require.Equal(t, http.StatusCreated, status, "the 409 was not stored under k-2: %v", again)
	require.NotEqual(t, first["id"], again["id"])
}

// A vehicle's STS and a driving licence have one spelling, as an ELS has:
// typed with Latin look-alikes, in lower case or with spaces, they are
// stored and echoed in Cyrillic capitals, and the same customer enrolling
// the same car in the other spelling gets 409 enrollment-exists naming the
// first enrollment. A fine the source filed under the Latin spelling
// reaches the enrollment and is paid.
func TestVehicleDocumentSpellingsAreOneEnrollment(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	pm := map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035}
	body := func(ref map[string]any) map[string]any {
		return map[string]any{"customer_id": "cust-car", "kind": "fines", "account_ref": ref, "currency": "RUB",
			"max_amount": 500000, "payment_method": pm}
	}
	status, _, first := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", "car-1",
		body(map[string]any{"sts": "77 ya 123456", "driver_license": "77AB654321"}))
	require.Equal(t, http.StatusCreated, status, "%v", first)
	require.Equal(t, map[string]any{"sts": "77УА123456", "driver_license": "77АВ654321"}, first["account_ref"])

	for i, ref := range []map[string]any{{"sts": "77УА123456"}, {"sts": "77YA123456"}, {"driver_license": "77АВ654321"}} {
		status, _, exists := b.callNodeAs(t, 0, adminKey, http.MethodPost, "/v1/enrollments", fmt.Sprintf("car-again-%d", i), body(ref))
		require.Equal(t, http.StatusConflict, status, "%v: %v", ref, exists)
		require.Equal(t, "https://rebill.dev/problems/enrollment-exists", exists["type"])
		require.Equal(t, first["id"], exists["enrollment_id"], "%v", ref)
	}

	enr := first["id"].(string)
	id := uin(7)
	published := map[string]any{"account_ref": map[string]any{"sts": "77YA123456"}}
	for k, v := range fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09") {
		published[k] = v
	}
	status, out := b.callStatus(t, http.MethodPost, "/v1/dev/bill-sources/fines/bills", published)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	b.waitBill(t, enr, id, "paid")
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+id))
}

// Two customers enrol the same car; the fine is pushed to both copies at
// once, many times over. The gateway sees exactly one authorize and one
// capture; the other copy is a duplicate that shows the customer only
// that it is paid elsewhere, and support the enrollment that pays it.
func TestSameCarEnrolledByTwoCustomersPaysTheFineOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	start := b.autopayStart(t)
	ann := b.enrol(t, "cust-ann", "fines", map[string]any{"sts": "77УА123456"}, "tok_ok")
	bob := b.enrol(t, "cust-bob", "fines", map[string]any{"sts": "77УА123456"}, "tok_ok")
	id := uin(77)
	body := fine(id, 100000, 50000, start.Add(-time.Hour), "2027-03-20", "2027-05-09")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		for _, enr := range []string{ann, bob} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, out := b.callNodeAs(t, i%2, adminKey, http.MethodPost, "/v1/enrollments/"+enr+"/bills",
					fmt.Sprintf("push-%s-%d", enr, i), body)
				if status != http.StatusCreated && status != http.StatusOK {
					t.Errorf("push: %d %v", status, out)
				}
			}()
		}
	}
	wg.Wait()
	var paid, duplicate string
	require.Eventually(t, func() bool {
		statuses := map[string]string{}
		for _, enr := range []string{ann, bob} {
			for _, bill := range b.bills(t, enr) {
				statuses[enr] = bill["status"].(string)
			}
		}
		switch {
		case statuses[ann] == "paid" && statuses[bob] == "duplicate":
			paid, duplicate = ann, bob
		case statuses[bob] == "paid" && statuses[ann] == "duplicate":
			paid, duplicate = bob, ann
		}
		return paid != ""
	}, 30*time.Second, 50*time.Millisecond)
	b.scanNow(t)
	ledger := b.ledger(t, "sim1")
	require.Equal(t, 1, succeededOps(ledger, "authorize", ann+":"+id, bob+":"+id), "one hold across both copies")
	require.Equal(t, 1, succeededOps(ledger, "capture", ann+":"+id, bob+":"+id), "one capture across both copies")
	require.Empty(t, b.enrollmentCharges(t, duplicate), "the duplicate copy has no charge")

	staff := b.bills(t, duplicate)[0]
	require.Equal(t, paid, staff["paid_by_enrollment_id"], "support sees which enrollment pays it")
	owner := "cust-ann"
	if duplicate == bob {
		owner = "cust-bob"
	}
	key := b.newKey(t, "customer", owner)
	status, mine := b.callAs(t, key, http.MethodGet, "/v1/enrollments/"+duplicate+"/bills", nil)
	require.Equal(t, http.StatusOK, status)
	own := mine["data"].([]any)[0].(map[string]any)
	require.Equal(t, "duplicate", own["status"])
	require.NotContains(t, own, "paid_by_enrollment_id", "a customer never sees the other enrollment")
}

// One customer's two enrollments of one account (made before enrollments
// were checked for repeats) and a bill published to the account's
// source: the pull delivers it to both, and it is paid once.
func TestOneAccountTwoEnrollmentsPullPaysOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	first := b.enrol(t, "cust-one", "housing", "75ДА533315", "tok_ok")
	second := b.enrol(t, "cust-two", "housing", "75ДА533315", "tok_ok")
	b.call(t, http.MethodPost, "/v1/dev/bill-sources/housing/bills", map[string]any{"account_ref": "75да533315",
		"bill_id": "ЖКУ-2027-02", "amount": 734500, "issued_at": start.Format(time.RFC3339), "due_date": "2027-03-25"})
	require.Eventually(t, func() bool {
		return len(b.bills(t, first)) == 1 && len(b.bills(t, second)) == 1
	}, 30*time.Second, 50*time.Millisecond)
	b.scanNow(t)
	require.Eventually(t, func() bool {
		s1, s2 := b.bills(t, first)[0]["status"], b.bills(t, second)[0]["status"]
		return (s1 == "paid" && s2 == "duplicate") || (s1 == "duplicate" && s2 == "paid")
	}, 30*time.Second, 50*time.Millisecond)
	ledger := b.ledger(t, "sim1")
	require.Equal(t, 1, succeededOps(ledger, "capture", first+":ЖКУ-2027-02", second+":ЖКУ-2027-02"))
}

// The copy that claimed a fine cannot pay it (its card is declined) and
// its enrollment is cancelled: its charge is voided, which releases the
// fine's identity; the other copy is scheduled and paid, and the
// released copy stays a duplicate for good, even after a card change.
func TestReleasedIdentityMovesTheNextCopyToScheduled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	ann := b.enrol(t, "cust-ann", "fines", map[string]any{"sts": "77УА654321"}, "tok_decline_funds")
	id := uin(78)
	body := fine(id, 100000, 50000, start.Add(-time.Hour), "2027-03-20", "2027-05-09")
	b.call(t, http.MethodPost, "/v1/enrollments/"+ann+"/bills", body)
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, ann)
		return len(cs) == 1 && cs[0]["status"] == "declined"
	}, 30*time.Second, 50*time.Millisecond)
	bob := b.enrol(t, "cust-bob", "fines", map[string]any{"sts": "77УА654321"}, "tok_ok")
	pushed := b.call(t, http.MethodPost, "/v1/enrollments/"+bob+"/bills", body)
	require.Equal(t, "duplicate", pushed["status"], "ann's charge holds the fine")
	b.scanNow(t)
	require.Equal(t, "duplicate", b.bills(t, bob)[0]["status"], "a declined charge still holds the fine")

	b.call(t, http.MethodPost, "/v1/enrollments/"+ann+"/cancel", nil)
	b.scanNow(t)
	b.waitBill(t, bob, id, "paid")
	require.Equal(t, "duplicate", b.bills(t, ann)[0]["status"], "the released copy is a duplicate for good")
	ledger := b.ledger(t, "sim1")
	require.Equal(t, 1, succeededOps(ledger, "capture", ann+":"+id, bob+":"+id))
	require.Zero(t, succeededOps(ledger, "authorize", ann+":"+id))

	var held int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM charges WHERE bill_identity = $1 AND identity_held`, "uin:"+id).Scan(&held))
	require.Equal(t, 1, held)
}

// The copy that claimed a fine is declined for good (a stolen card): no
// money ever moved. Alone, it stays failed, for its own enrollment's next
// card to pay; once another enrollment of the same car waits with a copy,
// the fine's identity is released to it and it pays, while the declined
// copy stays a duplicate for good.
func TestHardDeclinedCopyReleasesTheBillToTheOtherEnrollment(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	ann := b.enrol(t, "cust-ann", "fines", map[string]any{"sts": "77УА654322"}, "tok_decline_hard")
	id := uin(79)
	body := fine(id, 100000, 50000, start.Add(-time.Hour), "2027-03-20", "2027-05-09")
	b.call(t, http.MethodPost, "/v1/enrollments/"+ann+"/bills", body)
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, ann)
		return len(cs) == 1 && cs[0]["status"] == "failed"
	}, 30*time.Second, 50*time.Millisecond)
	b.scanNow(t)
	require.Equal(t, "failed", b.bills(t, ann)[0]["status"], "alone, the copy waits for its own enrollment's next card")

	bob := b.enrol(t, "cust-bob", "fines", map[string]any{"sts": "77УА654322"}, "tok_ok")
	b.call(t, http.MethodPost, "/v1/enrollments/"+bob+"/bills", body)
	b.scanNow(t)
	b.waitBill(t, bob, id, "paid")
	require.Equal(t, "duplicate", b.bills(t, ann)[0]["status"], "the released copy is a duplicate for good")
	ledger := b.ledger(t, "sim1")
	require.Equal(t, 1, succeededOps(ledger, "capture", ann+":"+id, bob+":"+id))
	require.Zero(t, succeededOps(ledger, "authorize", ann+":"+id))
}

// A fine stored while the check digit was read otherwise (second pass
// weighted 3..12) is re-pushed: it is found before its UIN is checked and
// replays, while a new bill with that UIN is refused.
func TestBillStoredUnderTheOldUINRuleReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	old := "36591361191407039424" // valid only under the 3..12 reading
	require.False(t, enrollments.ValidUIN(old))
	body := fine(old, 100000, 50000, start.Add(-time.Hour), "2027-03-20", "2027-05-09")
	status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusBadRequest, status, "%v", out)

	_, err := b.pool.Exec(context.Background(), `INSERT INTO bills (id, enrollment_id, customer_id, bill_id, amount,
			discounted_amount, discount_deadline, issued_at, due_date, status, pay_at, expires_at, received_at, updated_at, identity)
		VALUES (gen_random_uuid(), $1, 'cust-auto', $2, 100000, 50000, '2027-03-20', $3, '2027-05-09', 'withdrawn', $4, $5, $4, $4, $6)`,
		enr, old, start.Add(-time.Hour), start, start.Add(60*24*time.Hour), "uin:"+old)
	require.NoError(t, err)
	status, out = b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, old, out["bill_id"])
}
