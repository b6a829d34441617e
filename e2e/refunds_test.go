package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refunds lists a charge's refunds, oldest first.
func (b testBundle) refunds(t *testing.T, chargeID string) []map[string]any {
	t.Helper()
	data := b.call(t, http.MethodGet, "/v1/charges/"+chargeID+"/refunds?limit=100", nil)["data"].([]any)
	out := make([]map[string]any, len(data))
	for i, d := range data {
		out[i] = d.(map[string]any)
	}
	return out
}

// waitRefunds waits until the charge has want refunds, all in status, and
// returns them.
func (b testBundle) waitRefunds(t *testing.T, chargeID string, want int, status string) []map[string]any {
	t.Helper()
	var rs []map[string]any
	require.Eventually(t, func() bool {
		rs = b.refunds(t, chargeID)
		if len(rs) != want {
			return false
		}
		for _, r := range rs {
			if r["status"] != status {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "refunds of %s: %v", chargeID, func() any { return rs })
	return rs
}

// refundOps are the gateway's refund operations of a charge, by status,
// and the sum of the succeeded ones.
func refundOps(entries []ledgerEntry, chargeKey string) (byKey map[string]int, succeeded int64) {
	byKey = map[string]int{}
	for _, e := range entries {
		if e.Op == "refund" && strings.HasPrefix(e.IdempotencyKey, chargeKey+":r") {
			byKey[e.IdempotencyKey+":"+e.Status]++
			if e.Status == "succeeded" {
				succeeded += e.Amount
			}
		}
	}
	return byKey, succeeded
}

// paidCharge creates a subscription on a good card and returns its first
// charge once captured.
func (b testBundle) paidCharge(t *testing.T, token string) map[string]any {
	t.Helper()
	sub := b.createSubscription(t, token, "month")
	return b.waitCharges(t, sub, 1, "succeeded")[0]
}

// Refund requests racing on two nodes never reserve more than the capture,
// and the gateway's ledger never returns more than it captured: of twelve
// requests of 400 against a capture of 1500, three are accepted.
func TestConcurrentRefundsOnTwoNodesNeverExceedTheCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	c := b.paidCharge(t, "tok_ok")
	id, key := c["id"].(string), c["key"].(string)
	path := "/v1/charges/" + id + "/refunds"

	const racers = 12
	statuses := make([]int, racers)
	bodies := make([]map[string]any, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i], _, bodies[i] = b.callNodeAs(t, i%2, adminKey, http.MethodPost, path, fmt.Sprintf("%s-race-%d", t.Name(), i),
				map[string]any{"amount": 400, "reason": "duplicate"})
		}()
	}
	close(start)
	wg.Wait()
	accepted := 0
	for i, s := range statuses {
		switch s {
		case http.StatusCreated:
			accepted++
		case http.StatusConflict:
			require.Equal(t, "https://rebill.dev/problems/refund-amount-too-large", bodies[i]["type"], "%v", bodies[i])
		default:
			t.Fatalf("racer %d: %d %v", i, s, bodies[i])
		}
	}
	require.Equal(t, 3, accepted, "3 × 400 fit in 1500, a 4th does not")
	b.waitRefunds(t, id, 3, "succeeded")
	ops, sum := refundOps(b.ledger(t, "sim1"), key)
	require.Len(t, ops, 3, "one gateway refund per accepted request: %v", ops)
	require.Equal(t, int64(1200), sum)

	rest := b.call(t, http.MethodPost, path, map[string]any{"reason": "requested_by_customer"})
	require.EqualValues(t, 300, rest["amount"], "the rest")
	b.waitRefunds(t, id, 4, "succeeded")
	_, sum = refundOps(b.ledger(t, "sim1"), key)
	require.Equal(t, int64(1500), sum, "never above the capture at the gateway")
	charge := b.call(t, http.MethodGet, "/v1/charges/"+id, nil)
	require.Equal(t, "succeeded", charge["status"], "a refunded charge stays succeeded")
	require.EqualValues(t, 1500, charge["amount_refunded"])
	status, problem := b.callStatus(t, http.MethodPost, path, map[string]any{"amount": 1, "reason": "duplicate"})
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "https://rebill.dev/problems/charge-already-refunded", problem["type"])
	events := b.call(t, http.MethodGet, "/v1/events?limit=100&type=charge.refunded&object_id="+id, nil)["data"].([]any)
	require.Len(t, events, 1, "charge.refunded once, when the whole capture is returned")
}

// A refund whose answer is lost is looked up by its key and settled from
// what the gateway holds: the gateway performed it once, the send job ran
// once, and the look-up found it at its first try (a resend from the
// look-up would have lost its answer too, and the look-up would have run
// again).
func TestLostRefundAnswerIsLookedUpNotResent(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	c := b.paidCharge(t, "tok_ok")
	id, key := c["id"].(string), c["key"].(string)
	b.faults(t, map[string]any{"refunds_lost": true})
	refund := b.call(t, http.MethodPost, "/v1/charges/"+id+"/refunds", map[string]any{"amount": 500, "reason": "duplicate"})
	require.Equal(t, "pending", refund["status"])
	b.waitRefunds(t, id, 1, "succeeded")

	ops, sum := refundOps(b.ledger(t, "sim1"), key)
	require.Equal(t, map[string]int{key + ":r1:refund:succeeded": 1}, ops)
	require.Equal(t, int64(500), sum)
	ctx := context.Background()
	var sends, lookups, lookupAttempt int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE kind = 'refund_send'), count(*) FILTER (WHERE kind = 'refund_lookup'),
			coalesce(max(attempt) FILTER (WHERE kind = 'refund_lookup'), 0)
		FROM river_job WHERE args->>'refund_id' = $1`, refund["id"]).Scan(&sends, &lookups, &lookupAttempt))
	require.Equal(t, 1, sends)
	require.Equal(t, 1, lookups, "the lost answer was looked up")
	require.Equal(t, 1, lookupAttempt, "found at the first look-up, never sent again")
}

// A node that dies after the gateway refunded and before its answer is
// committed leaves the refund pending; the job's rerun on another node
// sends the same refund under the same key, and the gateway answers with
// its first refund: one refund at the gateway.
func TestRefundCrashBetweenCallAndCommitRefundsOnce(t *testing.T) {
	t.Parallel()
	overrides := map[string]string{"REBILL_GATEWAY_TIMEOUT": "3s", "REBILL_RESCUE_AFTER": "20s"}
	b := setup(t, 1, overrides)
	c := b.paidCharge(t, "tok_ok")
	id, key := c["id"].(string), c["key"].(string)
	ctx := context.Background()

	b.faults(t, map[string]any{"latency_ms": 1000})
	refund := b.call(t, http.MethodPost, "/v1/charges/"+id+"/refunds", map[string]any{"reason": "requested_by_customer"})
	// The send is under way (marked sent, the call held by the latency):
	// hold every write of refunds, so its answer cannot be committed.
	require.Eventually(t, func() bool {
		var sent bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT sent_at IS NOT NULL FROM refunds WHERE id = $1`, refund["id"]).Scan(&sent))
		return sent
	}, 30*time.Second, 5*time.Millisecond)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE refunds IN SHARE MODE`)
	require.NoError(t, err)
	b.waitLockWaiter(t, "refunds") // the answer came and waits to be written
	ops, _ := refundOps(b.ledger(t, "sim1"), key)
	require.Equal(t, map[string]int{key + ":r1:refund:succeeded": 1}, ops, "the gateway refunded")

	// The node dies: its job is cancelled mid-commit.
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, b.nodes[0].svc.River.StopAndCancel(stopCtx))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "pending", b.refunds(t, id)[0]["status"], "nothing committed")

	b.faults(t, map[string]any{"latency_ms": 0})
	b.nodes = append(b.nodes, startNode(t, b.pool, overrides))
	b.waitRefunds(t, id, 1, "succeeded")
	ops, sum := refundOps(b.ledger(t, "sim1"), key)
	require.Equal(t, map[string]int{key + ":r1:refund:succeeded": 1}, ops, "one refund at the gateway")
	require.Equal(t, int64(1500), sum)
	require.EqualValues(t, 1500, b.call(t, http.MethodGet, "/v1/charges/"+id, nil)["amount_refunded"])
}

// A fine's payment went to the state: refused, nothing sent. A housing
// bill's charge is refunded like any other.
func TestRefundOfAFineIsRefusedAndOfAHousingBillGoesThrough(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(391)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, id, "paid")
	fineCharge := b.enrollmentCharges(t, enr)[0]
	require.Equal(t, "succeeded", fineCharge["status"])
	status, problem := b.callStatus(t, http.MethodPost, "/v1/charges/"+fineCharge["id"].(string)+"/refunds",
		map[string]any{"reason": "requested_by_customer"})
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "https://rebill.dev/problems/fine-not-refundable", problem["type"])
	require.Contains(t, problem["detail"], "state's own procedure")
	ops, _ := refundOps(b.ledger(t, "sim1"), fineCharge["key"].(string))
	require.Empty(t, ops)
	require.Empty(t, b.refunds(t, fineCharge["id"].(string)))

	housing := b.createHousingEnrollment(t, "76ДЕ234599", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "R-1", "amount": 5000, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-03-25"})
	b.scanNow(t)
	b.waitBill(t, housing, "R-1", "paid")
	bill := b.enrollmentCharges(t, housing)[0]
	b.call(t, http.MethodPost, "/v1/charges/"+bill["id"].(string)+"/refunds", map[string]any{"amount": 2000, "reason": "duplicate"})
	b.waitRefunds(t, bill["id"].(string), 1, "succeeded")
	_, sum := refundOps(b.ledger(t, "sim1"), bill["key"].(string))
	require.Equal(t, int64(2000), sum)
}

// Customers never refund, not even their own charges; they read their
// charges' refunds.
func TestCustomerKeyCannotRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	c := b.paidCharge(t, "tok_ok")
	customer := b.newKey(t, "customer", "cust-e2e")
	path := "/v1/charges/" + c["id"].(string) + "/refunds"
	status, problem := b.callAs(t, customer, http.MethodPost, path, map[string]any{"reason": "requested_by_customer"})
	require.Equal(t, http.StatusForbidden, status, "%v", problem)
	status, _ = b.callAs(t, customer, http.MethodGet, path, nil)
	require.Equal(t, http.StatusOK, status)
	support := b.newKey(t, "support", "")
	status, _ = b.callAs(t, support, http.MethodPost, path, map[string]any{"amount": 100, "reason": "requested_by_customer"})
	require.Equal(t, http.StatusCreated, status)
	b.waitRefunds(t, c["id"].(string), 1, "succeeded")
}

// testRefundEventObjects: refund.created shows the POST's answer;
// refund.succeeded, refund.failed and charge.refunded show the objects as
// their reads answer once the job committed.
func testRefundEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	c := b.paidCharge(t, "tok_ok")
	id := c["id"].(string)
	refundOf := func(chargeID string) func(string) map[string]any {
		return func(refundID string) map[string]any {
			for _, r := range b.refunds(t, chargeID) {
				if r["id"] == refundID {
					return r
				}
			}
			t.Fatalf("refund %s not listed by charge %s", refundID, chargeID)
			return nil
		}
	}
	// The gateway answers late: the request's own event is alone.
	b.faults(t, map[string]any{"latency_ms": 1000})
	r := o.request(t, http.MethodPost, "/v1/charges/"+id+"/refunds", map[string]any{"reason": "requested_by_customer"}, nil,
		"refund.created")
	b.faults(t, map[string]any{"latency_ms": 0})
	o.settled(t, "refund.succeeded", r["id"].(string), refundOf(id))
	o.settled(t, "charge.refunded", id, o.charge(t))

	// A refund the gateway refuses: its charge's hold is unknown there.
	other := b.paidCharge(t, "tok_ok_other")
	_, err := b.pool.Exec(context.Background(), `UPDATE charges SET authorization_ref = 'sim1_op_unknown' WHERE id = $1`, other["id"])
	require.NoError(t, err)
	failed := b.call(t, http.MethodPost, "/v1/charges/"+other["id"].(string)+"/refunds", map[string]any{"amount": 100, "reason": "fraudulent"})
	o.settled(t, "refund.failed", failed["id"].(string), refundOf(other["id"].(string)))
	require.Equal(t, "invalid_authorization", refundOf(other["id"].(string))(failed["id"].(string))["failure_code"])
}
