package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

type registryEntry struct {
	Gateway   string    `json:"gateway"`
	PaymentID string    `json:"payment_id"`
	UIN       string    `json:"uin"`
	Amount    int64     `json:"amount"`
	Status    string    `json:"status"`
	At        time.Time `json:"at"`
}

func (b testBundle) registryLedger(t *testing.T, uin string) []registryEntry {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+"/v1/dev/registry/ledger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Data []registryEntry `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	var mine []registryEntry
	for _, e := range out.Data {
		if e.UIN == uin {
			mine = append(mine, e)
		}
	}
	return mine
}

// captureAt is when the gateway captured the charge with key chargeKey.
func (b testBundle) captureAt(t *testing.T, gateway, chargeKey string) time.Time {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+"/v1/dev/gateways/"+gateway+"/ledger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Data []struct {
			Op             string    `json:"op"`
			IdempotencyKey string    `json:"idempotency_key"`
			At             time.Time `json:"at"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	for _, e := range out.Data {
		if e.Op == "capture" && len(e.IdempotencyKey) > len(chargeKey) && e.IdempotencyKey[:len(chargeKey)] == chargeKey {
			return e.At
		}
	}
	t.Fatalf("no capture of %s", chargeKey)
	return time.Time{}
}

// A fine is posted to the state registry, once, under its UIN and the
// amount held, before it is captured; a housing bill is not posted.
func TestFineIsPostedToTheRegistryOnceBeforeItsCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(11)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, id, "paid")
	posted := b.registryLedger(t, id)
	require.Len(t, posted, 1)
	require.Equal(t, "accepted", posted[0].Status)
	require.EqualValues(t, 50000, posted[0].Amount)
	require.False(t, posted[0].At.After(b.captureAt(t, "sim1", enr+":"+id)), "posted before the capture")

	housing := b.createHousingEnrollment(t, "75ДГ000004", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "H-1", "amount": 1000, "issued_at": start.Format(time.RFC3339), "due_date": "2027-03-25"})
	b.waitBill(t, housing, "H-1", "paid")
	require.Empty(t, b.registryLedger(t, "H-1"))
}

// One registry gateway down, then both losing their answers: each fine is
// posted exactly once, through the gateway that works, and then captured.
func TestFinePostedOnceWhenARegistryGatewayIsDownOrLosesItsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)

	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": true})
	down := uin(12)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(down, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, down, "paid")
	posted := b.registryLedger(t, down)
	require.Len(t, posted, 1)
	require.Equal(t, "gmp2", posted[0].Gateway)

	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"down": false, "lose_response": true})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"lose_response": true})
	lost := uin(13)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(lost, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, lost, "paid")
	require.Len(t, b.registryLedger(t, lost), 1, "a lost answer is looked up, not posted again as a new payment")
	require.Equal(t, []int64{50000}, captured(b.ledger(t, "sim1"), enr+":"+lost))
}

// A posting the registry never takes fails for good: the charge goes to
// review and its hold is voided, never captured.
func TestPostingThatFailsForGoodVoidsTheHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_UNAVAILABLE_FOR": "2s"})
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	// Every posting fails (the registry still answers what was paid
	// elsewhere, so the fine is held).
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp1/faults", map[string]any{"error_rate": 1})
	b.call(t, http.MethodPost, "/v1/dev/registry/gmp2/faults", map[string]any{"error_rate": 1})
	id := uin(14)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	key := enr + ":" + id
	// The give-up counts on the service clock: the posting waits until the
	// dev clock has moved past it.
	require.Eventually(t, func() bool {
		var tried bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM river_job
			WHERE kind = 'registry_post' AND (state = 'scheduled' OR attempt > 0))`).Scan(&tried))
		return tried
	}, 20*time.Second, 10*time.Millisecond, "held, posting")
	require.Empty(t, opsFor(b.ledger(t, "sim1"), key)["void:succeeded"], "not given up on wall time")
	b.advance(t, "1h")
	require.Eventually(t, func() bool {
		return opsFor(b.ledger(t, "sim1"), key)["void:succeeded"] == 1
	}, 30*time.Second, 100*time.Millisecond, "the hold is voided: %v", func() any { return opsFor(b.ledger(t, "sim1"), key) })
	cs := b.enrollmentCharges(t, enr)
	require.Equal(t, "requires_review", cs[0]["status"])
	require.Contains(t, cs[0]["review_reason"], "registry")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key))
	require.Empty(t, b.registryLedger(t, id))
	queue := b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"].([]any)
	require.Equal(t, cs[0]["id"], queue[0].(map[string]any)["id"], "the fine's charge is in the review queue")

	// A person settles it as failed: the bill is failed, told to its
	// enrollment like a period's charge to its subscription.
	b.call(t, http.MethodPost, "/v1/charges/"+cs[0]["id"].(string)+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "registry gmp1/gmp2 failing every posting; sim1 shows the hold voided"})
	require.Equal(t, "failed", b.bills(t, enr)[0]["status"])
	events := b.call(t, http.MethodGet, "/v1/events?object_id="+enr+"&limit=100", nil)["data"].([]any)
	var types []string
	for _, e := range events {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	require.Subset(t, types, []string{"enrollment.created", "bill.received", "charge.requires_review", "charge.resolved", "bill.failed"})
}

// A fine withdrawn while its posting is under way: the hold is voided,
// nothing is captured, and the accepted posting is annulled.
func TestWithdrawnFineHasItsPostingAnnulled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_GATEWAY_TIMEOUT": "5s", "REBILL_RESCUE_AFTER": "30s"})
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	// The simulated registry writes its book as a posting arrives: with
	// the book locked against writes (on a connection of its own, the
	// node's pool is small), a posting that reaches a gateway waits there,
	// past its last look at the charge; reads (what was paid elsewhere)
	// still answer.
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
	require.NoError(t, err)
	defer conn.Close(ctx)
	atRegistry, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer atRegistry.Rollback(ctx)
	_, err = atRegistry.Exec(ctx, `LOCK TABLE dev_registry_ledger IN SHARE MODE`)
	require.NoError(t, err)
	id := uin(15)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	// Withdrawn while the posting is on its way to the registry: a
	// withdraw before it is sent posts nothing at all, and one after its
	// capture began is refused.
	b.waitLockWaiter(t, "dev_registry_ledger")
	require.Equal(t, "withdrawn", b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+id+"/withdraw", nil)["status"])
	require.NoError(t, atRegistry.Commit(ctx))
	require.Eventually(t, func() bool {
		posted := b.registryLedger(t, id)
		return len(posted) == 1 && posted[0].Status == "annulled"
	}, 30*time.Second, 100*time.Millisecond, "annulled: %v", func() any { return b.registryLedger(t, id) })
	ops := opsFor(b.ledger(t, "sim1"), enr+":"+id)
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, ops)
	require.Equal(t, "voided", b.enrollmentCharges(t, enr)[0]["status"])
}

// A registry that keeps a fine's payment processing past the hold's last
// moment to post (an hour before the discount ends): the hold is voided
// and nothing is captured, the posting is abandoned, never failed, and
// when the registry finishes with the payment and accepts it, rebill
// annuls it there: the registry's book holds no payment without its money.
func TestPaymentProcessingPastTheLastMomentIsAnnulledAtTheRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	for _, gw := range []string{"gmp1", "gmp2"} {
		b.call(t, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", map[string]any{"processing": 1000})
	}
	id := uin(16)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	require.Eventually(t, func() bool {
		posted := b.registryLedger(t, id)
		return len(posted) == 1 && posted[0].Status == "processing"
	}, 30*time.Second, 100*time.Millisecond, "posted, processing")
	paymentID := b.registryLedger(t, id)[0].PaymentID

	// 2027-03-20 20:00:30Z: within the last hour before the discount ends
	// (the end of 2027-03-20 in Moscow).
	b.advance(t, "467h0m30s")
	key := enr + ":" + id
	require.Eventually(t, func() bool {
		return opsFor(b.ledger(t, "sim1"), key)["void:succeeded"] == 1
	}, 30*time.Second, 100*time.Millisecond, "the hold is voided")
	var status string
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM registry_postings WHERE payment_id = $1`,
			paymentID).Scan(&status))
		return status == "abandoned"
	}, 30*time.Second, 100*time.Millisecond, "the posting is abandoned, not failed")

	// The registry finishes with the payment: its next look accepts it.
	_, err := b.pool.Exec(context.Background(), `UPDATE dev_registry_ledger SET looks_left = 0 WHERE payment_id = $1`, paymentID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, e := range b.registryLedger(t, id) {
			if e.PaymentID == paymentID {
				return e.Status == "annulled"
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "annulled at the registry")
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM registry_postings WHERE payment_id = $1`,
			paymentID).Scan(&status))
		return status == "annulled"
	}, 30*time.Second, 100*time.Millisecond, "recorded annulled after the registry's answer: %s", func() any { return status })
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key), "nothing captured")
}
