package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestTokenOKChargesOnceAtCreation(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_visa", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 1, cs[0]["attempt_count"])
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestLostResponseEndsSucceededWithOneOfEach(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_lost_response_1", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestFlakyGatewayIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_flaky_1", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestHardDeclineSkipsDunning(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_decline_hard", "month")
	cs := b.waitCharges(t, sub, 1, "failed")
	require.Nil(t, cs[0]["next_attempt_at"])
	got := b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)
	require.Equal(t, "unpaid", got["status"])
	b.advance(t, "240h")
	b.waitCharges(t, sub, 1, "failed")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:declined": 1}, ops, "no retry, no capture")
}

func TestSoftDeclineDunsThenNewCardPays(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_decline_funds", "month")
	cs := b.waitCharges(t, sub, 1, "declined")
	require.NotNil(t, cs[0]["next_attempt_at"])
	require.Equal(t, "insufficient_funds", cs[0]["failure_code"])
	require.Equal(t, "past_due", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])

	b.advance(t, "25h") // the +1d retry: a new attempt, a new key, declined again
	require.Eventually(t, func() bool {
		c := b.charges(t, sub)[0]
		return c["attempt_count"] == float64(2) && c["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond)

	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method",
		map[string]any{"gateway": "sim1", "token": "tok_ok_new", "exp_month": 1, "exp_year": 2036})
	cs = b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 3, cs[0]["attempt_count"])
	require.Equal(t, "active", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])

	key := cs[0]["key"].(string)
	ledger := b.ledger(t, "sim1")
	require.Equal(t, map[string]int{"authorize:declined": 2, "authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(ledger, key))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(ledger, key+":a3"))
}

func TestDunningExhaustionMakesSubscriptionUnpaid(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_decline_funds", "year")
	b.waitCharges(t, sub, 1, "declined")
	for attempt, advance := range []string{"24h", "48h", "48h", "48h"} {
		b.advance(t, advance)
		want := float64(attempt + 2)
		require.Eventually(t, func() bool {
			c := b.charges(t, sub)[0]
			return c["attempt_count"] == want && (c["status"] == "declined" || c["status"] == "failed")
		}, 20*time.Second, 50*time.Millisecond, "attempt %v", want)
	}
	cs := b.waitCharges(t, sub, 1, "failed")
	require.EqualValues(t, 5, cs[0]["attempt_count"])
	require.Equal(t, "unpaid", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])
	require.Len(t, opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string)), 1, "five declined authorizations, nothing else")
	require.Equal(t, 5, opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))["authorize:declined"])
}

func TestGatewayDownChargesWaitAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": true})
	subs := make([]string, 6)
	for i := range subs {
		subs[i] = b.createSubscription(t, "tok_ok_down", "month")
	}
	for _, sub := range subs {
		// Six charges of one customer at once may briefly find its five
		// decline slots in flight (velocity_slots_in_flight); each then
		// waits on the gateway, and says so.
		var c map[string]any
		require.Eventually(t, func() bool {
			c = b.charges(t, sub)[0]
			return c["next_attempt_at"] != nil &&
				(c["failure_code"] == "gateway_unavailable" || c["failure_code"] == "gateway_circuit_open")
		}, 10*time.Second, 50*time.Millisecond, "a waiting charge shows when it is tried next, and why")
		require.Contains(t, []any{"scheduled", "authorizing"}, c["status"], "waiting, not failed or re-routed")
	}
	// The node sees sim1 fail: its circuit opens and new bindings go to
	// the next cheapest gateway, while sim1's charges stay where they are.
	require.Eventually(t, func() bool {
		route := b.call(t, http.MethodGet, "/v1/routing/binding?currency=RUB&amount=49900", nil)
		return route["gateway"] == "sim2"
	}, 15*time.Second, 100*time.Millisecond, "routing avoids the failing gateway")
	gws := b.call(t, http.MethodGet, "/v1/gateways", nil)["data"].([]any)
	sim1 := gws[0].(map[string]any)
	require.Equal(t, "sim1", sim1["name"])
	health := sim1["health"].(map[string]any)
	require.Greater(t, health["error_rate"], 0.5)
	for _, gw := range []string{"sim2", "sim3", "sim4", "sim5"} {
		require.Empty(t, b.ledger(t, gw), "never re-routed to %s", gw)
	}
	for _, sub := range subs {
		require.Equal(t, "sim1", b.charges(t, sub)[0]["gateway"], "the charge stays on its token's gateway")
	}
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": false})
	ledger := func() []ledgerEntry { return b.ledger(t, "sim1") }
	for _, sub := range subs {
		cs := b.waitCharges(t, sub, 1, "succeeded")
		require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(ledger(), cs[0]["key"].(string)))
	}
}

func TestExhaustedRetriesLandInReviewAndAreResolved(t *testing.T) {
	t.Parallel()
	// tok_flaky answers 503 twice per key: a charge waits on such a
	// gateway at most REBILL_UNAVAILABLE_FOR, then goes to the review queue.
	b := setup(t, 1, map[string]string{"REBILL_UNAVAILABLE_FOR": "1ms"})
	sub := b.createSubscription(t, "tok_flaky_review", "month")
	cs := b.waitCharges(t, sub, 1, "requires_review")
	id := cs[0]["id"].(string)

	queue := b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"].([]any)
	require.Len(t, queue, 1)
	require.Equal(t, id, queue[0].(map[string]any)["id"])

	status, problem := b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/resolve", map[string]any{"outcome": "succeeded"})
	require.Equal(t, http.StatusBadRequest, status, "evidence is required: %v", problem)

	resolved := b.call(t, http.MethodPost, "/v1/charges/"+id+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "sim1 ledger shows no operation for this key"})
	require.Equal(t, "failed", resolved["status"])
	require.Empty(t, b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"])

	status, problem = b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/resolve",
		map[string]any{"outcome": "succeeded", "evidence": "again"})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, problem["type"], "invalid-transition")
	require.Empty(t, opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string)), "the gateway never acted")
}

func TestClockJumpChargesEachMissedPeriodOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_catchup", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	b.advance(t, "2232h") // 93 days: three more periods have started
	cs := b.waitCharges(t, sub, 4, "succeeded")
	keys := map[string]bool{}
	ledger := b.ledger(t, "sim1")
	for _, c := range cs {
		keys[c["period_key"].(string)] = true
		require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(ledger, c["key"].(string)))
	}
	require.Len(t, keys, 4)
	b.advance(t, "1h")
	b.scanNow(t)
	require.Len(t, b.charges(t, sub), 4, "nothing new is due")
}

func TestPausedPeriodsAreSkippedNotOwed(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_pause", "week")
	b.waitCharges(t, sub, 1, "succeeded")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{})
	b.advance(t, "720h") // four weeks paused
	b.scanNow(t)
	require.Len(t, b.charges(t, sub), 1, "no charge while paused")

	resumed := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
	require.Equal(t, "active", resumed["status"])
	cs := b.waitCharges(t, sub, 2, "succeeded")
	require.Equal(t, resumed["current_period"].(map[string]any)["key"], cs[0]["period_key"], "the new period starts at the resume")
}

func TestScheduledResumeChargesAtResumeAt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_resume_at", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	now := b.clockNow(t)
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause",
		map[string]any{"resume_at": now.Add(10 * 24 * time.Hour).Format(time.RFC3339)})
	b.advance(t, "240h")
	b.waitCharges(t, sub, 2, "succeeded")
	require.Equal(t, "active", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])
}

func TestMonthAnchoredOn31stBillsOnLastDay(t *testing.T) {
	t.Parallel()
	// Thirteen months at once: past the default catch-up window.
	b := setup(t, 1, map[string]string{"REBILL_CATCH_UP_WINDOW": "17520h"})
	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2027-01-30T00:00:00Z"})
	body := subscriptionBody("tok_ok_31", "month")
	body["billing_anchor"] = "2027-01-31T10:00:00Z"
	body["timezone"] = "Europe/Berlin"
	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2028-03-01T00:00:00Z"})
	cs := b.waitCharges(t, sub, 14, "succeeded")
	keys := map[string]bool{}
	for _, c := range cs {
		keys[c["period_key"].(string)] = true
	}
	for _, want := range []string{"2027-01-31", "2027-02-28", "2027-04-30", "2028-01-31", "2028-02-29"} {
		require.True(t, keys[want], "period %s charged: %v", want, keys)
	}
}

func TestCancelVoidsAndStopsCharging(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_cancel", "day")
	b.waitCharges(t, sub, 1, "succeeded")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{})
	b.advance(t, "72h")
	b.scanNow(t)
	require.Len(t, b.charges(t, sub), 1)
}

// A subscription's receipt reaches each of its charges, which send it with
// their hold and capture.
func TestReceiptIsKeptOnEveryCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	body := subscriptionBody("tok_ok_receipt", "month")
	receipt := map[string]any{"customer": map[string]any{"phone": "79001234567"},
		"items": []any{map[string]any{"description": "Plan", "quantity": "3", "amount": 500, "vat_code": 4}}}
	body["receipt"] = receipt
	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	b.waitCharges(t, sub, 1, "succeeded")
	b.advance(t, "744h")
	b.waitCharges(t, sub, 2, "succeeded")
	rows, err := b.pool.Query(context.Background(), `SELECT receipt FROM charges WHERE subscription_id = $1`, sub)
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, pgx.RowTo[map[string]any])
	require.NoError(t, err)
	require.Equal(t, jsonRoundTrip(t, []map[string]any{receipt, receipt}), jsonRoundTrip(t, stored))
}

func jsonRoundTrip(t *testing.T, v []map[string]any) []map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var out []map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// A hold that could not be captured within its gateway's hold lifetime (7
// days for dev mode's simulators) is never captured late: moving the dev
// clock past it makes the waiting capture void the old hold first, then a
// new attempt holds and captures. The simulator's ledger shows one capture
// and never two live holds.
func TestHoldPastItsLifetimeIsVoidedThenPlacedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_BREAKER_OPEN_FOR": "1s"})
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"captures_down": true})
	sub := b.createSubscription(t, "tok_ok_hold", "month")
	var key string
	require.Eventually(t, func() bool {
		cs := b.charges(t, sub)
		if len(cs) == 0 || cs[0]["next_attempt_at"] == nil {
			return false
		}
		key = cs[0]["key"].(string)
		return cs[0]["status"] == "capturing" || cs[0]["status"] == "authorized"
	}, 15*time.Second, 50*time.Millisecond, "the hold is placed and its capture waits")
	require.Equal(t, map[string]int{"authorize:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key))

	b.advance(t, "167h") // 7 days less an hour: the old hold is voided, a new one placed
	require.Eventually(t, func() bool {
		return opsFor(b.ledger(t, "sim1"), key)["authorize:succeeded"] == 2
	}, 20*time.Second, 100*time.Millisecond, "a new hold after the old one is voided")
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"captures_down": false})
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 2, cs[0]["attempt_count"], "the second attempt, with new keys")

	var ops []string
	for _, e := range b.ledger(t, "sim1") {
		if strings.HasPrefix(e.IdempotencyKey, key+":") {
			ops = append(ops, strings.TrimPrefix(e.IdempotencyKey, key+":")+" "+e.Status)
		}
	}
	require.Equal(t, []string{"a1:authorize succeeded", "a1:void succeeded", "a2:authorize succeeded", "a2:capture succeeded"},
		ops, "the old hold is released before the new one is placed; one capture")
}
