package e2e_test

import (
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The HTTP contract of subscription changes on whole nodes: what reaches
// the gateway, when, and what the subscription shows.

// updateSubscriptionBody is a subscription of customer at 1500 USD a month.
func updateSubscriptionBody(customer string) map[string]any {
	body := subscriptionBody("tok_ok", "month")
	body["customer_id"] = customer
	return body
}

// startedSubscription creates a subscription whose first period is paid
// and returns it as read afterwards.
func (b testBundle) startedSubscription(t *testing.T, customer string) map[string]any {
	t.Helper()
	id := b.call(t, http.MethodPost, "/v1/subscriptions", updateSubscriptionBody(customer))["id"].(string)
	b.waitCharges(t, id, 1, "succeeded")
	return b.subscription(t, id)
}

func periodOf(t *testing.T, sub map[string]any) (start, end time.Time) {
	t.Helper()
	p := sub["current_period"].(map[string]any)
	start, err := time.Parse(time.RFC3339Nano, p["start"].(string))
	require.NoError(t, err)
	end, err = time.Parse(time.RFC3339Nano, p["end"].(string))
	require.NoError(t, err)
	return start, end
}

// proratedDifference is diff times the unused share of the period, the
// seconds left over the period's seconds, rounded half to even to a whole
// minor unit.
func proratedDifference(diff int64, left, length time.Duration) int64 {
	r := new(big.Rat).SetFrac(big.NewInt(diff*int64(left/time.Second)), big.NewInt(int64(length/time.Second)))
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	twice := new(big.Int).Mul(rem, big.NewInt(2))
	switch c := twice.Cmp(r.Denom()); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func TestProratedDifferenceRoundsHalfToEven(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(750), proratedDifference(1500, 15*time.Second, 30*time.Second))
	require.Equal(t, int64(0), proratedDifference(1, 1*time.Second, 2*time.Second), "0.5 rounds to 0")
	require.Equal(t, int64(2), proratedDifference(3, 1*time.Second, 2*time.Second), "1.5 rounds to 2")
	require.Equal(t, int64(1), proratedDifference(1, 2*time.Second, 3*time.Second))
}

// An upgrade effective now with charge_now creates one adjustment charge
// for the difference over the unused part of the period, paid at the
// gateway once (a retry of the request under its key changes nothing),
// and the next period is charged at the new price.
func TestUpgradeNowChargesTheProratedDifferenceOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.startedSubscription(t, "cust-upgrade")
	id := sub["id"].(string)
	start, end := periodOf(t, sub)
	b.advance(t, "241h13m7s") // an uneven share of the period is left

	now := b.clockNow(t)
	body := map[string]any{"amount": 4000, "effective": "now", "proration": "charge_now"}
	status, first := postKeyed(t, b.url(), "/v1/subscriptions/"+id+"/update", adminKey, "upgrade-1", body)
	require.Equal(t, http.StatusOK, status, "%v", first)
	require.EqualValues(t, 4000, first["amount"])
	status, again := postKeyed(t, b.url(), "/v1/subscriptions/"+id+"/update", adminKey, "upgrade-1", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, first, again, "the retry is the first answer")

	want := proratedDifference(4000-1500, end.Sub(now), end.Sub(start))
	require.Positive(t, want)
	cs := b.waitCharges(t, id, 2, "succeeded")
	adj := cs[0]
	require.EqualValues(t, want, adj["amount"], "the difference over the unused %v of %v", end.Sub(now), end.Sub(start))
	require.NotEqual(t, cs[1]["key"], adj["key"], "an adjustment has a key of its own")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(b.ledger(t, "sim1"), adj["key"].(string)))
	var captured []int64
	for _, e := range b.ledger(t, "sim1") {
		if e.Op == "capture" && e.Status == "succeeded" {
			captured = append(captured, e.Amount)
		}
	}
	require.Equal(t, []int64{1500, want}, captured, "the first period and the adjustment, nothing else")

	b.advance(t, end.Sub(now).String())
	cs = b.waitCharges(t, id, 3, "succeeded")
	require.EqualValues(t, 4000, cs[0]["amount"], "the next period at the new price")
}

// A downgrade at period end is the pending update until the period ends:
// nothing is charged or credited meanwhile, and the next period is charged
// at the new price. A removed one leaves the next period at the old price.
func TestDowngradeAtPeriodEndAppliesAtTheBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	kept := b.startedSubscription(t, "cust-downgrade")
	removed := b.startedSubscription(t, "cust-removed")
	_, end := periodOf(t, removed) // created last, its period ends last
	b.advance(t, "72h")

	for _, sub := range []map[string]any{kept, removed} {
		id := sub["id"].(string)
		changed := b.call(t, http.MethodPost, "/v1/subscriptions/"+id+"/update", map[string]any{"amount": 900, "effective": "period_end"})
		require.EqualValues(t, 1500, changed["amount"], "the price in force until the period ends")
		pending := changed["pending_update"].(map[string]any)
		require.EqualValues(t, 900, pending["amount"])
		require.Nil(t, pending["interval"], "what the change leaves is null")
		_, subEnd := periodOf(t, sub)
		require.Equal(t, subEnd.UTC().Format(time.RFC3339), pending["effective_at"])
		require.EqualValues(t, 0, changed["credit_balance"])
		require.Equal(t, pending, b.subscription(t, id)["pending_update"])
	}
	removedID := removed["id"].(string)
	gone := b.call(t, http.MethodPost, "/v1/subscriptions/"+removedID+"/pending_update/remove", nil)
	require.Nil(t, gone["pending_update"])
	require.EqualValues(t, 1500, gone["amount"])
	again := b.call(t, http.MethodPost, "/v1/subscriptions/"+removedID+"/pending_update/remove", nil)
	require.Nil(t, again["pending_update"])
	require.Equal(t, gone["updated_at"], again["updated_at"], "removing nothing changes nothing")

	b.scanNow(t)
	require.Len(t, b.charges(t, kept["id"].(string)), 1, "nothing is charged before the boundary")

	b.advance(t, end.Sub(b.clockNow(t)).String())
	cs := b.waitCharges(t, kept["id"].(string), 2, "succeeded")
	require.EqualValues(t, 900, cs[0]["amount"], "the next period at the new price")
	after := b.subscription(t, kept["id"].(string))
	require.Nil(t, after["pending_update"])
	require.EqualValues(t, 900, after["amount"])
	cs = b.waitCharges(t, removedID, 2, "succeeded")
	require.EqualValues(t, 1500, cs[0]["amount"], "the removed change never applied")

	types := func(id string) map[string]bool {
		seen := map[string]bool{}
		for _, e := range b.call(t, http.MethodGet, "/v1/events?limit=100&object_id="+id, nil)["data"].([]any) {
			seen[e.(map[string]any)["type"].(string)] = true
		}
		return seen
	}
	require.True(t, types(kept["id"].(string))["subscription.update_scheduled"])
	require.True(t, types(kept["id"].(string))["subscription.updated"])
	require.True(t, types(removedID)["subscription.update_removed"])
	require.False(t, types(removedID)["subscription.updated"])
}

// Changes of one subscription sent at once under different keys, to two
// nodes, are each applied whole or refused whole (409): the subscription
// ends with the amount and the description of one of them, never a mix,
// and what each 200 answered is its own change.
func TestConcurrentUpdatesNeverMix(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	for _, effective := range []string{"now", "period_end"} {
		sub := b.startedSubscription(t, "cust-race-"+effective)
		id := sub["id"].(string)
		const n = 6
		type answer struct {
			status int
			body   map[string]any
		}
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := map[string]any{"amount": 2000 + i, "description": fmt.Sprintf("change %d", i), "effective": effective}
				if effective == "now" {
					body["proration"] = "none"
				}
				status, out := postKeyed(t, b.nodes[i%2].server.URL, "/v1/subscriptions/"+id+"/update", adminKey,
					fmt.Sprintf("race-%s-%d", effective, i), body)
				answers[i] = answer{status, out}
			}()
		}
		wg.Wait()

		terms := func(s map[string]any) (any, any) {
			if effective == "now" {
				return s["amount"], s["description"]
			}
			p := s["pending_update"].(map[string]any)
			return p["amount"], p["description"]
		}
		won := 0
		for i, a := range answers {
			switch a.status {
			case http.StatusOK:
				won++
				amount, description := terms(a.body)
				require.EqualValues(t, 2000+i, amount, "answer %d is its own change", i)
				require.Equal(t, fmt.Sprintf("change %d", i), description)
			case http.StatusConflict:
				require.Equal(t, "https://rebill.dev/problems/invalid-transition", a.body["type"], "%v", a.body)
			default:
				t.Fatalf("change %d: %d %v", i, a.status, a.body)
			}
		}
		require.Positive(t, won)
		amount, description := terms(b.subscription(t, id))
		i := int(amount.(float64)) - 2000
		require.Equal(t, fmt.Sprintf("change %d", i), description, "the amount and description of one change")
		require.Equal(t, http.StatusOK, answers[i].status, "the change that stands was answered 200")
		b.scanNow(t)
		require.Len(t, b.charges(t, id), 1, "no proration, no charge")
	}
}

// A customer key changes only its own subscriptions (another's is 404
// and nothing changes), cannot choose the proration (only the configured
// default is accepted), and cannot change the currency; support chooses.
func TestCustomerKeysAndSubscriptionUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	keyFor := func(customer string) string {
		return b.call(t, http.MethodPost, "/v1/api-keys", map[string]any{"role": "customer", "customer_id": customer})["key"].(string)
	}
	alice, mallory := keyFor("cust-alice"), keyFor("cust-mallory")
	support := b.call(t, http.MethodPost, "/v1/api-keys", map[string]any{"role": "support"})["key"].(string)
	sub := b.startedSubscription(t, "cust-alice")
	id := sub["id"].(string)

	status, out := b.callAs(t, mallory, http.MethodPost, "/v1/subscriptions/"+id+"/update", map[string]any{"amount": 1})
	require.Equal(t, http.StatusNotFound, status, "%v", out)
	status, out = b.callAs(t, mallory, http.MethodPost, "/v1/subscriptions/"+id+"/update",
		map[string]any{"amount": 900, "effective": "period_end"})
	require.Equal(t, http.StatusNotFound, status, "%v", out)
	status, out = b.callAs(t, mallory, http.MethodPost, "/v1/subscriptions/"+id+"/pending_update/remove", nil)
	require.Equal(t, http.StatusNotFound, status, "%v", out)
	require.Equal(t, sub, b.subscription(t, id), "mallory changed nothing")

	status, out = b.callAs(t, alice, http.MethodPost, "/v1/subscriptions/"+id+"/update", map[string]any{"amount": 900, "currency": "EUR"})
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Equal(t, "currency", out["errors"].([]any)[0].(map[string]any)["field"])

	accepted := 0
	for _, p := range []string{"none", "charge_now", "credit_next"} {
		status, out = b.callAs(t, alice, http.MethodPost, "/v1/subscriptions/"+id+"/update",
			map[string]any{"description": "by alice, " + p, "proration": p})
		switch status {
		case http.StatusOK:
			accepted++
		case http.StatusBadRequest:
			require.Equal(t, "proration", out["errors"].([]any)[0].(map[string]any)["field"], "%v", out)
		default:
			t.Fatalf("proration %s: %d %v", p, status, out)
		}
	}
	require.Equal(t, 1, accepted, "only the configured default")
	b.scanNow(t)
	require.Len(t, b.charges(t, id), 1)

	status, out = b.callAs(t, support, http.MethodPost, "/v1/subscriptions/"+id+"/update",
		map[string]any{"amount": 1000, "proration": "credit_next"})
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.EqualValues(t, 1000, out["amount"])
	require.Positive(t, out["credit_balance"], "support chose to credit the downgrade's unused difference")
}
