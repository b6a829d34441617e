package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/metrics"
)

// callNodeAs sends a request with key to node n under idempotencyKey (POSTs)
// and returns the status, the headers and the decoded body.
func (b testBundle) callNodeAs(t *testing.T, n int, key, method, path, idempotencyKey string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, b.nodes[n].server.URL+path, bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, res.Header, out
}

func (b testBundle) customerSubscriptions(t *testing.T, customerID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM subscriptions WHERE customer_id = $1`, customerID).Scan(&n))
	return n
}

func TestVelocityLimitsCreationsAcrossNodes(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, map[string]string{"REBILL_VELOCITY_CREATIONS_PER_HOUR": "4"})
	customer := b.newKey(t, "customer", "cust-e2e")

	// Ten creations at once, spread over both nodes: exactly four pass.
	statuses := make([]int, 10)
	headers := make([]http.Header, 10)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			statuses[i], headers[i], _ = b.callNodeAs(t, i%2, customer, http.MethodPost, "/v1/subscriptions",
				fmt.Sprintf("burst-%d", i), subscriptionBody("tok_ok", "month"))
		})
	}
	wg.Wait()
	created, limited := 0, []int{}
	for i, status := range statuses {
		switch status {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			limited = append(limited, i)
		default:
			t.Fatalf("request %d: status %d", i, status)
		}
	}
	require.Equal(t, 4, created)
	require.Len(t, limited, 6)
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.VelocityLimited.WithLabelValues("creations")), 6.0)
	require.Equal(t, 4, b.customerSubscriptions(t, "cust-e2e"))

	now := b.clockNow(t)
	untilHour := int(now.Truncate(time.Hour).Add(time.Hour).Sub(now).Seconds())
	retryAfter, err := strconv.Atoi(headers[limited[0]].Get("Retry-After"))
	require.NoError(t, err)
	require.InDelta(t, untilHour, retryAfter, 1, "Retry-After is the end of the clock hour")

	t.Run("staff keys are exempt", func(t *testing.T) {
		status, _, _ := b.callNodeAs(t, 1, adminKey, http.MethodPost, "/v1/subscriptions", "staff-1", subscriptionBody("tok_ok", "month"))
		require.Equal(t, http.StatusCreated, status)
	})

	t.Run("a 429 is not stored under its key", func(t *testing.T) {
		key := fmt.Sprintf("burst-%d", limited[0])
		status, _, body := b.callNodeAs(t, 0, customer, http.MethodPost, "/v1/subscriptions", key, subscriptionBody("tok_ok", "month"))
		require.Equal(t, http.StatusTooManyRequests, status, "still limited: %v", body)
		require.Equal(t, "https://rebill.dev/problems/velocity-limit", body["type"])
		b.advance(t, fmt.Sprintf("%ds", retryAfter))
		status, header, _ := b.callNodeAs(t, 1, customer, http.MethodPost, "/v1/subscriptions", key, subscriptionBody("tok_ok", "month"))
		require.Equal(t, http.StatusCreated, status, "the next hour runs the refused key")
		require.Empty(t, header.Get("Idempotent-Replayed"))
		require.Equal(t, 6, b.customerSubscriptions(t, "cust-e2e"))
	})
}

func TestVelocityLimitsPaymentMethodChanges(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, map[string]string{"REBILL_VELOCITY_CARD_CHANGES_PER_DAY": "2"})
	customer := b.newKey(t, "customer", "cust-e2e")
	status, _, sub := b.callNodeAs(t, 0, customer, http.MethodPost, "/v1/subscriptions", "create", subscriptionBody("tok_ok", "month"))
	require.Equal(t, http.StatusCreated, status)
	path := "/v1/subscriptions/" + sub["id"].(string) + "/payment-method"
	card := func(token string) map[string]any {
		return map[string]any{"gateway": "sim1", "token": token, "exp_month": 12, "exp_year": 2035}
	}
	// The card given at creation was no change; two changes pass, and the
	// same card again is a retry, not a change.
	for i, token := range []string{"tok_ok_2", "tok_ok_3", "tok_ok_3"} {
		status, _, body := b.callNodeAs(t, i%2, customer, http.MethodPost, path, fmt.Sprintf("change-%d", i), card(token))
		require.Equal(t, http.StatusOK, status, "change %d: %v", i, body)
	}
	storedToken := func() string {
		var token string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT pm_token FROM subscriptions WHERE id = $1`, sub["id"]).Scan(&token))
		return token
	}
	before := storedToken()
	status, header, body := b.callNodeAs(t, 1, customer, http.MethodPost, path, "change-3", card("tok_ok_4"))
	require.Equal(t, http.StatusTooManyRequests, status, "%v", body)
	require.NotEmpty(t, header.Get("Retry-After"))
	require.Equal(t, before, storedToken(), "the refused change changed nothing")
	status, _, _ = b.callNodeAs(t, 0, adminKey, http.MethodPost, path, "staff-change", card("tok_ok_5"))
	require.Equal(t, http.StatusOK, status, "staff keys are exempt")
}

func TestVelocityDeclinesSendNewChargesToReview(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, map[string]string{"REBILL_VELOCITY_DECLINES_PER_DAY": "2"})
	for range 2 {
		sub := b.createSubscription(t, "tok_decline_funds", "month")
		b.waitCharges(t, sub, 1, "declined")
	}
	held := b.createSubscription(t, "tok_ok", "month")
	cs := b.waitCharges(t, held, 1, "requires_review")
	require.Contains(t, cs[0]["review_reason"], "velocity limit")
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.VelocityLimited.WithLabelValues("declines")), 1.0)
	key := held + ":" + cs[0]["period_key"].(string)
	require.Empty(t, opsFor(b.ledger(t, "sim1"), key), "the held charge never reached the gateway")

	// Another customer is not affected.
	other := subscriptionBody("tok_ok", "month")
	other["customer_id"] = "cust-other"
	otherSub := b.call(t, http.MethodPost, "/v1/subscriptions", other)["id"].(string)
	b.waitCharges(t, otherSub, 1, "succeeded")

	// A person's retry sends it to the gateway.
	b.call(t, http.MethodPost, "/v1/charges/"+cs[0]["id"].(string)+"/retry", map[string]any{})
	b.waitCharges(t, held, 1, "succeeded")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key))

	// The next UTC day counts afresh (just past midnight: the dunning
	// attempts of the declined charges, a day after them, would decline
	// again and count in the new day).
	now := b.clockNow(t)
	b.advance(t, now.Truncate(24*time.Hour).Add(24*time.Hour+time.Second).Sub(now).String())
	fresh := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, fresh, 1, "succeeded")
}

// burstSubscriptions creates n subscriptions of customer cust-e2e on token at
// once, spread over the bundle's nodes, and returns their ids.
func (b testBundle) burstSubscriptions(t *testing.T, n int, token string) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			status, _, body := b.callNodeAs(t, i%len(b.nodes), adminKey, http.MethodPost, "/v1/subscriptions",
				fmt.Sprintf("%s-burst-%d", t.Name(), i), subscriptionBody(token, "month"))
			if status == http.StatusCreated {
				ids[i] = body["id"].(string)
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NotEmpty(t, id, "subscription %d not created", i)
	}
	return ids
}

// authorizesSent counts the authorize calls the gateway's ledger shows.
func authorizesSent(entries []ledgerEntry) int {
	n := 0
	for _, e := range entries {
		if e.Op == "authorize" {
			n++
		}
	}
	return n
}

// Twenty first charges of one customer on a declining card at once, over
// two nodes: each reserves a slot of the day's declines before its
// authorize, so at most the limit reach the gateway; the rest wait for
// the calls in flight and go to review once the declines are recorded.
func TestVelocityDeclineSlotsHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil) // the default limit: 5 declines a day
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 150})
	subs := b.burstSubscriptions(t, 20, "tok_decline_funds")
	declined, review := 0, 0
	for _, sub := range subs {
		cs := b.waitCharges(t, sub, 1, "declined", "requires_review")
		if cs[0]["status"] == "declined" {
			declined++
		} else {
			require.Contains(t, cs[0]["review_reason"], "velocity limit")
			review++
		}
	}
	require.Equal(t, 5, authorizesSent(b.ledger(t, "sim1")), "the gateway saw the limit's worth of authorizes, no more")
	require.Equal(t, 5, declined)
	require.Equal(t, 15, review)
	var count int
	var slots []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count, slots FROM velocity_counters
		WHERE customer_id = 'cust-e2e' AND name = 'declines'`).Scan(&count, &slots))
	require.Equal(t, 5, count)
	require.Empty(t, slots, "every slot was converted into its decline")
}

// Twenty first charges on a good card at once all reach the gateway and
// succeed: an approval gives its slot back, and the charges that found
// every slot in flight waited for one instead of going to review.
func TestVelocityDeclineSlotsLetGoodCardsThrough(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 150})
	subs := b.burstSubscriptions(t, 20, "tok_ok")
	for _, sub := range subs {
		b.waitCharges(t, sub, 1, "succeeded")
	}
	require.Equal(t, 20, authorizesSent(b.ledger(t, "sim1")))
	var slots []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT slots FROM velocity_counters
		WHERE customer_id = 'cust-e2e' AND name = 'declines'`).Scan(&slots))
	require.Empty(t, slots, "every approval gave its slot back")
}

// A charge that finds the day's only slot taken by a call in flight waits
// (its job snoozes, the charge shows why), and goes to the gateway once
// the approval of that call frees the slot.
func TestVelocityWaitingChargeProceedsWhenSlotFrees(t *testing.T) {
	t.Parallel()
	// The first call holds the slot for 4 s: long enough for the second
	// charge to meet it in flight on a loaded machine.
	b := setup(t, 1, map[string]string{"REBILL_VELOCITY_DECLINES_PER_DAY": "1", "REBILL_GATEWAY_TIMEOUT": "6s",
		"REBILL_RESCUE_AFTER": "30s"})
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 4000})
	first := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, first, 1, "authorizing")
	second := b.createSubscription(t, "tok_ok", "month")
	var waiting map[string]any
	require.Eventually(t, func() bool {
		waiting = b.charges(t, second)[0]
		return waiting["failure_code"] == "velocity_slots_in_flight"
	}, 10*time.Second, 20*time.Millisecond, "the second charge waits for the slot")
	require.Equal(t, "authorizing", waiting["status"])
	require.NotNil(t, waiting["next_attempt_at"])
	var job int64
	var waiters []int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT j.id, v.waiters FROM river_job j, velocity_counters v
		WHERE j.kind = 'charge_authorize' AND j.args ->> 'charge_id' = $1 AND v.customer_id = 'cust-e2e' AND v.name = 'declines'`,
		waiting["id"]).Scan(&job, &waiters))
	require.Equal(t, []int64{job}, waiters, "its job waits among the customer's waiters, to be woken when the slot frees")

	b.waitCharges(t, first, 1, "succeeded")
	cs := b.waitCharges(t, second, 1, "succeeded")
	require.Nil(t, cs[0]["failure_code"])
	var snoozes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce((metadata ->> 'snoozes')::int, 0) FROM river_job
		WHERE kind = 'charge_authorize' AND args ->> 'charge_id' = $1`, waiting["id"]).Scan(&snoozes))
	require.Positive(t, snoozes, "its job snoozed: it waited instead of being sent")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1},
		opsFor(b.ledger(t, "sim1"), second+":"+cs[0]["period_key"].(string)))
}

// An authorize whose outcome is unknown keeps its slot until its look-up
// settles it (another charge waits meanwhile); the approval found then
// gives it back, and the waiting charge goes on. An authorize its gateway
// did nothing with is not in flight: it gives its slot back while it
// waits for the gateway.
func TestVelocitySlotOfAnUnknownOutcomeIsKeptUntilSettled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_VELOCITY_DECLINES_PER_DAY": "1"})
	slots := func() []string {
		var s []string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT slots FROM velocity_counters
			WHERE customer_id = 'cust-e2e' AND name = 'declines'`).Scan(&s))
		return s
	}
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 700}) // past the 400 ms timeout
	first := b.createSubscription(t, "tok_ok", "month")
	c := b.waitCharges(t, first, 1, "unknown")[0]
	require.Equal(t, []string{c["id"].(string) + "/1"}, slots(), "the unknown outcome keeps the day's only slot")
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": true, "latency_ms": 0})
	require.Eventually(t, func() bool {
		return b.charges(t, first)[0]["failure_code"] == "gateway_unavailable"
	}, 10*time.Second, 20*time.Millisecond, "the look-up waits for the gateway")
	require.Equal(t, []string{c["id"].(string) + "/1"}, slots(), "a look-up that waits keeps the slot")
	second := b.createSubscription(t, "tok_ok", "month")
	require.Eventually(t, func() bool {
		return b.charges(t, second)[0]["failure_code"] == "velocity_slots_in_flight"
	}, 10*time.Second, 20*time.Millisecond, "the second charge waits behind the unknown one")

	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": false})
	b.waitCharges(t, first, 1, "succeeded")
	b.waitCharges(t, second, 1, "succeeded")
	require.Empty(t, slots())

	t.Run("a gateway that did nothing frees the slot", func(t *testing.T) {
		b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": true})
		third := b.createSubscription(t, "tok_ok", "month")
		require.Eventually(t, func() bool {
			return b.charges(t, third)[0]["failure_code"] == "gateway_unavailable"
		}, 10*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool { return len(slots()) == 0 }, 10*time.Second, 20*time.Millisecond)
		b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": false})
		b.waitCharges(t, third, 1, "succeeded")
	})
}

// The attack of a first attempt that gets no verdict: it goes to review
// holding the day's only slot, its hold is released, support retries it
// (attempt 2, which the limit does not hold) and it succeeds. The slot of
// attempt 1 must not stay held: the customer's next good-card charge goes
// straight to the gateway instead of waiting until midnight UTC.
func TestVelocitySlotIsGivenBackAfterReviewAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_VELOCITY_DECLINES_PER_DAY": "1", "REBILL_CHARGE_MAX_ATTEMPTS": "2"})
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 700}) // past the 400 ms timeout
	first := b.createSubscription(t, "tok_ok", "month")
	c := b.waitCharges(t, first, 1, "requires_review")[0]
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 0})
	require.Eventually(t, func() bool {
		var released bool
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT hold_released_at IS NOT NULL FROM charges WHERE id = $1`,
			c["id"]).Scan(&released))
		return released
	}, 30*time.Second, 20*time.Millisecond, "the review's hold check released the hold")
	b.call(t, http.MethodPost, "/v1/charges/"+c["id"].(string)+"/retry", map[string]any{})
	b.waitCharges(t, first, 1, "succeeded")

	next := b.createSubscription(t, "tok_ok", "month")
	cs := b.waitCharges(t, next, 1, "succeeded")
	var snoozes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce((metadata ->> 'snoozes')::int, 0) FROM river_job
		WHERE kind = 'charge_authorize' AND args ->> 'charge_id' = $1`, cs[0]["id"]).Scan(&snoozes))
	require.Zero(t, snoozes, "the next charge went to the gateway without waiting for a slot")
	var slots []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT slots FROM velocity_counters
		WHERE customer_id = 'cust-e2e' AND name = 'declines'`).Scan(&slots))
	require.Empty(t, slots)
}

// slotWaits sums the waits for a declines slot of the authorize jobs of
// the charges of subs (a wait for a gateway that did nothing, which a
// loaded machine can cause, is not one).
func (b testBundle) slotWaits(t *testing.T, subs []string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(sum(coalesce((j.metadata ->> 'slot_waits')::int, 0)), 0)
		FROM river_job j JOIN charges c ON c.id = (j.args ->> 'charge_id')::uuid
		WHERE j.kind = 'charge_authorize' AND c.subscription_id = ANY($1::uuid[])`, subs).Scan(&n))
	return n
}

// A payer whose card a first charge approved is not held to the declines
// limit's slots: the first charges of two hundred subscriptions due at
// once, over two nodes, all go to the gateway without one of them waiting
// for a slot (the approved pool, REBILL_VELOCITY_APPROVED_IN_FLIGHT, is
// 200), and their approvals leave no slot held.
func TestVelocityApprovedCardIsNotHeldBySlots(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil) // the default limit: 5 declines a day
	first := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, first, 1, "succeeded")
	subs := b.burstSubscriptions(t, 200, "tok_ok")
	for _, sub := range subs {
		b.waitCharges(t, sub, 1, "succeeded")
	}
	require.Zero(t, b.slotWaits(t, subs), "no first charge waited for a slot")
	require.Equal(t, 201, authorizesSent(b.ledger(t, "sim1")))
	var slots []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT slots FROM velocity_counters
		WHERE customer_id = 'cust-e2e' AND name = 'declines'`).Scan(&slots))
	require.Empty(t, slots)
}
