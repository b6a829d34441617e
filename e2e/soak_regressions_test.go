package e2e_test

// Rules the chaos soak (package soak) exercises only by chance, each
// pinned end to end with the smallest schedule that breaks it.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An authorize whose answer was lost is looked up, not found, and resent
// by the reconcile job under the same key. When the gateway answers the
// resend with a 503 (it did nothing), the job waits and runs again; it must
// not take the charge, "authorizing" rather than "unknown" by then, for
// stale and complete, or the charge stays authorizing for ever with no job
// to move it (and a capture resent the same way leaves a live hold).
func TestReconcileResendRefusedByGatewayIsNotStranded(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.faults(t, map[string]any{"latency_ms": 1000}) // the authorize times out; the sim drops it unperformed
	sub := b.createSubscription(t, "tok_ok_0101", "month")
	b.waitCharges(t, sub, 1, "unknown")
	// The lookups answer (not found) and the resend is refused with a 503.
	b.faults(t, map[string]any{"latency_ms": 0, "error_rate": 1})
	require.Eventually(t, func() bool {
		c := b.charges(t, sub)[0]
		return c["status"] == "authorizing" && c["failure_code"] == "gateway_unavailable"
	}, 20*time.Second, 20*time.Millisecond, "the resend waits on the gateway")
	b.waitSnoozes(t, "charge_reconcile", b.charges(t, sub)[0]["id"].(string), 3) // it runs again, and again, while the gateway refuses
	b.faults(t, map[string]any{"error_rate": 0})

	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.Equal(t, []string{"a1:authorize:succeeded:0101", "a1:capture:succeeded:0101"},
		b.gatewayOps(t, "sim1", cs[0]["key"].(string)))
}

// A period that began while the subscription was active is owed, even
// when a pause comes before the scan billed it (the scan runs every minute
// in production, and a node crash or a clock jump widens the gap). The
// scan skips paused subscriptions and the resume starts a new grid, so
// such a period would be lost for good: a pause bills what is due first,
// as create and resume do.
func TestPauseBillsThePeriodsThatBeganBeforeIt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_SCAN_INTERVAL": "1h"}) // only clock moves scan
	sub := b.createSubscription(t, "tok_ok_0201", "day")
	b.waitCharges(t, sub, 1, "succeeded")
	// Three days and a minute pass before any scan looks.
	_, err := b.pool.Exec(context.Background(), `UPDATE dev_clock SET now = now + interval '3 days 1 minute'`)
	require.NoError(t, err)
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{})
	b.advance(t, "1s") // a scan runs; the subscription is paused

	b.waitCharges(t, sub, 4, "succeeded")
	require.Equal(t, "paused", b.subscription(t, sub)["status"])
}

// A person resolving a charge in review as failed makes the subscription
// unpaid now (docs/operations.md: "failed makes the subscription unpaid"),
// not as of the due time of the charge's last attempt, which may lie months
// back. Backdated, the end of dunning would void the charges of periods
// that began in between while the subscription was active: owed periods
// that a new card would then never collect.
func TestResolveFailedDoesNotBackdateUnpaid(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.faults(t, map[string]any{"latency_ms": 1000}) // the first period's charge ends in review
	sub := b.createSubscription(t, "tok_ok_0301", "month")
	first := b.waitCharges(t, sub, 1, "requires_review")[0]
	b.faults(t, map[string]any{"latency_ms": 0})
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method", card("tok_decline_funds_0302"))
	b.advance(t, "745h") // the second period begins while active, and is declined
	b.waitCharges(t, sub, 2, "requires_review", "declined")

	b.call(t, http.MethodPost, "/v1/charges/"+first["id"].(string)+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "sim1: no operation with this key"})
	require.Equal(t, "unpaid", b.subscription(t, sub)["status"])
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method", card("tok_ok_0303"))

	cs := b.waitCharges(t, sub, 2, "failed", "succeeded")
	require.Equal(t, "succeeded", cs[0]["status"], "the second period, owed, is collected with the new card: %v", cs[0])
}

// Periods that begin while a subscription is unpaid are not owed
// (decision 7): a card change or a same-card retry skips them, and so must
// an unpaid subscription that becomes active again because a charge still
// in flight was paid, or the next scan bills every period that began while
// it was unpaid.
func TestReactivationFromUnpaidSkipsThePeriodsThatBeganWhileUnpaid(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.faults(t, map[string]any{"latency_ms": 1000}) // the first period's charge ends in review
	sub := b.createSubscription(t, "tok_ok_0401", "month")
	first := b.waitCharges(t, sub, 1, "requires_review")[0]
	b.faults(t, map[string]any{"latency_ms": 0, "down": true})
	b.advance(t, "745h") // the second period begins while active; its charge waits on the gateway
	require.Eventually(t, func() bool {
		cs := b.charges(t, sub)
		return len(cs) == 2 && cs[0]["status"] == "authorizing" &&
			(cs[0]["failure_code"] == "gateway_unavailable" || cs[0]["failure_code"] == "gateway_circuit_open")
	}, 20*time.Second, 20*time.Millisecond, "the second period's charge waits: %v", func() any { return b.charges(t, sub) })
	b.call(t, http.MethodPost, "/v1/charges/"+first["id"].(string)+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "sim1: no operation with this key"})
	require.Equal(t, "unpaid", b.subscription(t, sub)["status"])
	b.advance(t, "745h") // the third period begins while unpaid: not owed

	b.faults(t, map[string]any{"down": false}) // the second period's charge is paid
	require.Eventually(t, func() bool { return b.subscription(t, sub)["status"] == "active" }, 40*time.Second, 20*time.Millisecond,
		"reactivated: %v", func() any { return b.charges(t, sub) })
	b.advance(t, "1s")
	b.waitJobsIdle(t, "billing_scan")
	b.scanNow(t) // a whole scan has run: a period it bills has its charge
	cs := b.charges(t, sub)
	require.Len(t, cs, 2, "no charge for the period that began while unpaid: %v", cs)
	require.Equal(t, "succeeded", cs[0]["status"])
}

// A charge that goes to review while it may hold an authorization has its
// hold looked up and voided unless captured (decision 11). While its
// gateway is down that check waits, and a person may resolve the charge as
// failed meanwhile: the waiting job then finds the charge out of review,
// and must still check and release the hold, or the authorization stays
// held on the customer's card for good.
func TestResolveFailedBeforeTheHoldCheckStillReleasesTheHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_UNAVAILABLE_FOR": "2s"})
	sub := b.createSubscription(t, "tok_lost_response_0501", "month")
	key := ""
	require.Eventually(t, func() bool { // the gateway placed the hold; its answer is being lost
		if cs := b.charges(t, sub); len(cs) == 1 {
			key = cs[0]["key"].(string)
		}
		return key != "" && len(b.gatewayOps(t, "sim1", key)) == 1
	}, 10*time.Second, 10*time.Millisecond)
	b.faults(t, map[string]any{"down": true}) // the lookups, and then the hold check, find the gateway down
	c := b.waitCharges(t, sub, 1, "requires_review")[0]
	b.call(t, http.MethodPost, "/v1/charges/"+c["id"].(string)+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "the customer's bank shows no payment"})
	b.faults(t, map[string]any{"down": false})

	require.Eventually(t, func() bool {
		ops := b.gatewayOps(t, "sim1", key)
		return len(ops) == 2 && ops[1] == "a1:void:succeeded:0501"
	}, 30*time.Second, 50*time.Millisecond, "the hold is voided: %v", func() any { return b.gatewayOps(t, "sim1", key) })
}

// The hold check of a charge in review waits out a gateway that answers
// 503, however long. A gateway whose look-ups time out (slow, not down)
// must be waited out too: failing as an ordinary error, the check would be
// retried REBILL_CHARGE_MAX_ATTEMPTS times and discarded, and the
// authorization would stay held. Look-ups and the void are safe to repeat
// (the same keys), so a check that got no answer waits like one the
// gateway refused.
func TestHoldCheckWaitsOutASlowGateway(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_CHARGE_MAX_ATTEMPTS": "2"})
	sub := b.createSubscription(t, "tok_lost_response_0601", "month")
	key := ""
	require.Eventually(t, func() bool { // the gateway placed the hold; its answer is being lost
		if cs := b.charges(t, sub); len(cs) == 1 {
			key = cs[0]["key"].(string)
		}
		return key != "" && len(b.gatewayOps(t, "sim1", key)) == 1
	}, 10*time.Second, 10*time.Millisecond)
	b.faults(t, map[string]any{"latency_ms": 1000}) // every look-up times out
	b.waitCharges(t, sub, 1, "requires_review")
	// Long enough for River to run the hold check twice and discard it,
	// had it failed.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var discarded bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM river_job
			WHERE kind = 'charge_release_hold' AND state = 'discarded')`).Scan(&discarded))
		if discarded {
			break
		}
	}
	b.faults(t, map[string]any{"latency_ms": 0})

	require.Eventually(t, func() bool {
		ops := b.gatewayOps(t, "sim1", key)
		return len(ops) == 2 && ops[1] == "a1:void:succeeded:0601"
	}, 30*time.Second, 50*time.Millisecond, "the hold is voided")
}
