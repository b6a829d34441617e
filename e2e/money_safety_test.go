package e2e_test

// Subscription events that race billing, each reproduced end to end and
// judged on the simulated gateway's own ledger: which token, which
// operations, under which keys. Every test here failed before the charge
// state machine asked "is this charge still wanted, with this card?" at
// each step that moves money.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatewayOps lists a charge's ledger entries as "a<attempt>:<op>:<status>:<last4>".
func (b testBundle) gatewayOps(t *testing.T, gateway, chargeKey string) []string {
	t.Helper()
	var ops []string
	for _, e := range b.ledger(t, gateway) {
		if rest, ok := strings.CutPrefix(e.IdempotencyKey, chargeKey+":"); ok {
			attempt, _, _ := strings.Cut(rest, ":")
			ops = append(ops, attempt+":"+e.Op+":"+e.Status+":"+e.TokenLast4)
		}
	}
	return ops
}

func (b testBundle) faults(t *testing.T, faults map[string]any) {
	t.Helper()
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", faults)
}

func (b testBundle) subscription(t *testing.T, id string) map[string]any {
	t.Helper()
	return b.call(t, http.MethodGet, "/v1/subscriptions/"+id, nil)
}

func card(token string) map[string]any {
	return map[string]any{"gateway": "sim1", "token": token, "exp_month": 12, "exp_year": 2035}
}

// A card change while the first authorize is in flight. The
// attempt in flight finishes with the old card; the next one starts at once
// with the new card, and no second hold is placed beside the first.
func TestCardChangeDuringAuthorizeIsUsedByTheNextAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_GATEWAY_TIMEOUT": "4s", "REBILL_RESCUE_AFTER": "40s"})
	b.faults(t, map[string]any{"latency_ms": 1500})
	sub := b.createSubscription(t, "tok_decline_funds_0001", "month")
	// Once the charge is authorizing, its first attempt's card is fixed.
	require.Eventually(t, func() bool {
		cs := b.charges(t, sub)
		return len(cs) == 1 && cs[0]["status"] == "authorizing"
	}, 20*time.Second, 20*time.Millisecond)
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method", card("tok_ok_0002"))

	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 2, cs[0]["attempt_count"])
	require.Equal(t, []string{
		"a1:authorize:declined:0001",
		"a2:authorize:succeeded:0002",
		"a2:capture:succeeded:0002",
	}, b.gatewayOps(t, "sim1", cs[0]["key"].(string)))
	require.Equal(t, "active", b.subscription(t, sub)["status"])
}

// The same card sent again is the customer saying "try again":
// a waiting charge is retried at once, except after a lost or stolen card.
func TestSameCardAgainRetriesUnlessLostOrStolen(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_decline_funds_0003", "month")
	b.waitCharges(t, sub, 1, "declined")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method", card("tok_decline_funds_0003"))
	require.Eventually(t, func() bool {
		c := b.charges(t, sub)[0]
		return c["attempt_count"] == float64(2) && c["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond)
	key := b.charges(t, sub)[0]["key"].(string)
	require.Equal(t, []string{"a1:authorize:declined:0003", "a2:authorize:declined:0003"}, b.gatewayOps(t, "sim1", key))

	stolen := b.createSubscription(t, "tok_decline_hard_0004", "month")
	cs := b.waitCharges(t, stolen, 1, "failed")
	status, problem := b.callStatus(t, http.MethodPost, "/v1/subscriptions/"+stolen+"/payment-method", card("tok_decline_hard_0004"))
	require.Equal(t, http.StatusConflict, status, "%v", problem)
	require.Contains(t, problem["type"], "invalid-transition")
	require.Contains(t, problem["detail"], "stolen_card")
	require.Equal(t, []string{"a1:authorize:declined:0004"}, b.gatewayOps(t, "sim1", cs[0]["key"].(string)))
	require.EqualValues(t, 1, b.charges(t, stolen)[0]["attempt_count"])
}

// A capture whose outcome is unknown, then a cancel. The lookup
// finds no capture: the hold is voided, never captured.
func TestCancelWhileCaptureIsUnknownVoidsTheHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_GATEWAY_TIMEOUT": "2s", "REBILL_RESCUE_AFTER": "40s", "REBILL_CHARGE_MAX_ATTEMPTS": "50"})
	b.faults(t, map[string]any{"captures_down": true})
	sub := b.createSubscription(t, "tok_ok_0005", "month")
	var key string
	require.Eventually(t, func() bool {
		cs := b.charges(t, sub)
		if len(cs) == 0 || cs[0]["status"] != "capturing" || cs[0]["next_attempt_at"] == nil {
			return false
		}
		key = cs[0]["key"].(string)
		return len(b.gatewayOps(t, "sim1", key)) == 1
	}, 20*time.Second, 50*time.Millisecond, "the hold is placed and its capture waits")
	b.faults(t, map[string]any{"captures_down": false, "latency_ms": 6000}) // the capture and its lookups time out
	require.Eventually(t, func() bool {
		c := b.charges(t, sub)[0]
		key = c["key"].(string)
		return c["status"] == "unknown"
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"a1:authorize:succeeded:0005"}, b.gatewayOps(t, "sim1", key))

	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{})
	b.faults(t, map[string]any{"latency_ms": 0})
	b.waitCharges(t, sub, 1, "voided")
	require.Equal(t, []string{"a1:authorize:succeeded:0005", "a1:void:succeeded:0005"}, b.gatewayOps(t, "sim1", key))
}

// A cancel scheduled at period end before the first anchor
// takes effect at the anchor: the first period is never charged.
func TestCancelAtPeriodEndBeforeTheFirstAnchorChargesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	anchor := b.clockNow(t).Add(30 * 24 * time.Hour).Truncate(time.Second)
	body := subscriptionBody("tok_ok_0006", "month")
	body["billing_anchor"] = anchor.Format(time.RFC3339)
	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	require.Equal(t, true, b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel",
		map[string]any{"at_period_end": true})["cancel_at_period_end"])
	b.advance(t, "744h")
	require.Eventually(t, func() bool { return b.subscription(t, sub)["status"] == "cancelled" },
		20*time.Second, 50*time.Millisecond)
	require.Equal(t, anchor.UTC().Format(time.RFC3339), b.subscription(t, sub)["cancelled_at"])
	require.Empty(t, b.charges(t, sub))
}

// Pause and resume keep a scheduled cancel, and resuming starts
// no new period after it.
func TestScheduledCancelSurvivesPauseAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_0007", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{"at_period_end": true})
	paused := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{})
	require.Equal(t, true, paused["cancel_at_period_end"])
	b.advance(t, "72h") // resume on another day than the period's start
	resumed := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
	require.Equal(t, "active", resumed["status"])
	require.Equal(t, true, resumed["cancel_at_period_end"])
	require.Len(t, b.charges(t, sub), 1, "a resume before the scheduled cancel starts no new period")

	b.advance(t, "744h")
	require.Eventually(t, func() bool { return b.subscription(t, sub)["status"] == "cancelled" },
		20*time.Second, 50*time.Millisecond)
	require.Len(t, b.charges(t, sub), 1)
}

// When the period ends while paused, the scheduled cancel takes
// effect then, and a later resume is refused.
func TestScheduledCancelTakesEffectWhilePaused(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_0011", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{"at_period_end": true})
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{})
	b.advance(t, "744h")
	require.Eventually(t, func() bool { return b.subscription(t, sub)["status"] == "cancelled" },
		20*time.Second, 50*time.Millisecond)
	status, problem := b.callStatus(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
	require.Equal(t, http.StatusConflict, status, "%v", problem)
	require.Contains(t, problem["type"], "invalid-transition")
	require.Len(t, b.charges(t, sub), 1)
}

// Pause and resume during a trial keep the anchor.
func TestResumeBeforeTheFirstAnchorKeepsTheAnchor(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	anchor := b.clockNow(t).Add(10 * 24 * time.Hour).Truncate(time.Second).UTC().Format(time.RFC3339)
	body := subscriptionBody("tok_ok_0012", "month")
	body["billing_anchor"] = anchor
	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{})
	resumed := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
	require.Equal(t, anchor, resumed["billing_anchor"])
	require.Equal(t, anchor, resumed["next_charge_at"])
	require.Empty(t, b.charges(t, sub), "nothing is due before the anchor")

	b.advance(t, "240h")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.Equal(t, anchor[:10], cs[0]["period_key"])
}

// Periods that begin while a subscription is unpaid are not
// owed. The charge created at the moment dunning ended is voided, no
// period is billed while unpaid, and a card change months later retries
// the old charge alone and goes on along the original anchor grid.
func TestUnpaidPeriodsAreNotOwed(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	created := b.clockNow(t)
	sub := b.createSubscription(t, "tok_decline_funds_0008", "week")
	first := b.waitCharges(t, sub, 1, "declined")[0]
	for attempt, advance := range []string{"24h", "48h", "48h", "48h"} {
		b.advance(t, advance)
		want := float64(attempt + 2)
		require.Eventually(t, func() bool {
			cs := b.charges(t, sub)
			c := cs[len(cs)-1]
			return c["attempt_count"] == want && (c["status"] == "declined" || c["status"] == "failed")
		}, 20*time.Second, 50*time.Millisecond, "attempt %v", want)
	}
	require.Eventually(t, func() bool { return b.subscription(t, sub)["status"] == "unpaid" }, 20*time.Second, 50*time.Millisecond)
	cs := b.waitCharges(t, sub, 2, "failed", "voided")
	require.Equal(t, "voided", cs[0]["status"], "the period that began when dunning ended is not owed")
	require.Equal(t, "subscription_unpaid", cs[0]["failure_code"])
	require.Equal(t, "failed", cs[1]["status"])

	b.advance(t, "1440h") // two months unpaid
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method", card("tok_ok_0009"))
	cs = b.waitCharges(t, sub, 2, "succeeded", "voided")
	require.Equal(t, first["id"], cs[1]["id"])
	require.Equal(t, "succeeded", cs[1]["status"])
	got := b.subscription(t, sub)
	require.Equal(t, "active", got["status"])
	next, err := time.Parse(time.RFC3339, got["next_charge_at"].(string))
	require.NoError(t, err)
	require.True(t, next.After(b.clockNow(t)))
	require.Zero(t, next.Sub(created.Truncate(time.Second))%(7*24*time.Hour), "the original anchor grid: %s", next)
	captures := 0
	for _, c := range cs {
		for _, op := range b.gatewayOps(t, "sim1", c["key"].(string)) {
			if strings.Contains(op, ":capture:") {
				captures++
			}
		}
	}
	require.Equal(t, 1, captures, "no back-billing burst")
}

// A gateway failing half of its calls with a definite 503 slows
// charges down but neither strands them nor sends them to review.
func TestPartialOutageNeitherStrandsNorReviews(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_CHARGE_MAX_ATTEMPTS": "2", "REBILL_BREAKER_OPEN_FOR": "500ms"})
	b.faults(t, map[string]any{"error_rate": 0.5})
	subs := make([]string, 20)
	for i := range subs {
		subs[i] = b.createSubscription(t, "tok_ok_outage", "month")
	}
	// Half the calls failing keeps tripping the circuit (over 50 % of at
	// least 10 calls), so the calls pass mostly one probe at a time: the
	// bound is for a loaded machine, not for how long this usually takes.
	for _, sub := range subs {
		cs := b.waitChargesWithin(t, 3*time.Minute, sub, 1, "succeeded")
		require.Equal(t, []string{"a1:authorize:succeeded:tage", "a1:capture:succeeded:tage"},
			b.gatewayOps(t, "sim1", cs[0]["key"].(string)))
	}
	require.Empty(t, b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"])
}

// A charge sent to review while it holds an authorization has
// its hold looked up and voided; it can then not be resolved as succeeded,
// and a support retry makes a new attempt that pays.
func TestReviewReleasesTheHoldAndRetryPays(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_GATEWAY_TIMEOUT": "3s", "REBILL_RESCUE_AFTER": "40s", "REBILL_UNAVAILABLE_FOR": "10s"})
	b.faults(t, map[string]any{"captures_down": true}) // the capture is refused with 503
	sub := b.createSubscription(t, "tok_ok_0010", "month")
	require.Eventually(t, func() bool {
		cs := b.charges(t, sub)
		return len(cs) == 1 && cs[0]["status"] == "capturing" && len(b.gatewayOps(t, "sim1", cs[0]["key"].(string))) == 1
	}, 10*time.Second, 50*time.Millisecond, "the hold is placed and its capture waits")
	// Everything is refused now: the capture gives up and the hold cannot be looked up.
	b.faults(t, map[string]any{"down": true, "captures_down": false})
	cs := b.waitCharges(t, sub, 1, "requires_review")
	id, key := cs[0]["id"].(string), cs[0]["key"].(string)
	require.Equal(t, "gateway_unavailable", cs[0]["review_code"], "%v", cs[0])

	status, problem := b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/retry", map[string]any{})
	require.Equal(t, http.StatusServiceUnavailable, status, "the gateway cannot be asked whether a hold is live: %v", problem)

	b.faults(t, map[string]any{"down": false})
	require.Eventually(t, func() bool {
		c := b.call(t, http.MethodGet, "/v1/charges/"+id, nil)
		return strings.Contains(c["review_reason"].(string), "voided")
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"a1:authorize:succeeded:0010", "a1:void:succeeded:0010"}, b.gatewayOps(t, "sim1", key))

	status, problem = b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/resolve",
		map[string]any{"outcome": "succeeded", "evidence": "it was paid, surely"})
	require.Equal(t, http.StatusConflict, status, "%v", problem)

	retried := b.call(t, http.MethodPost, "/v1/charges/"+id+"/retry", map[string]any{})
	require.EqualValues(t, 2, retried["attempt_count"])
	b.waitCharges(t, sub, 1, "succeeded")
	require.Equal(t, []string{"a1:authorize:succeeded:0010", "a1:void:succeeded:0010",
		"a2:authorize:succeeded:0010", "a2:capture:succeeded:0010"}, b.gatewayOps(t, "sim1", key))

	status, _ = b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/retry", map[string]any{})
	require.Equal(t, http.StatusConflict, status, "a succeeded charge is never retried")
}

// After a long outage a yearly plan is charged for the current
// period only (missed periods older than the catch-up window are skipped).
func TestCatchUpCountsTimeNotPeriods(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_0013", "year")
	b.waitCharges(t, sub, 1, "succeeded")
	b.advance(t, "43848h") // five years and two days
	cs := b.waitCharges(t, sub, 2, "succeeded")
	require.Equal(t, b.subscription(t, sub)["current_period"].(map[string]any)["key"], cs[0]["period_key"])
}

// The created event has no previous status.
func TestCreatedEventHasNoFromStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_0014", "month")
	events := b.call(t, http.MethodGet, "/v1/subscriptions/"+sub+"/events", nil)["data"].([]any)
	created := events[0].(map[string]any)
	require.Equal(t, "created", created["type"])
	require.Contains(t, created, "from_status")
	require.Nil(t, created["from_status"])
}
