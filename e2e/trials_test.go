package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// A trial through two nodes whose scans run at once with the dev clock's
// jumps: nothing is charged during it, subscription.trial_will_end is
// published and delivered once (late: the clock jumped past its time),
// and at the trial's end the subscription becomes active and its first
// period, which begins at the trial's end, is captured once.
func TestTrialEndsWithOneNoticeAndOneCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	var mu sync.Mutex
	delivered := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(body, &e)
		mu.Lock()
		delivered[e.Type]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": receiver.URL,
		"events": []string{"subscription.trial_will_end", "subscription.trial_ended", "charge.succeeded"}})

	// Refusals first: a trial sets the first anchor, and is one of the two.
	start := b.clockNow(t)
	body := subscriptionBody("tok_ok_visa", "month")
	body["trial_period_days"], body["billing_anchor"] = 7, start.Add(time.Hour).Format(time.RFC3339)
	status, problem := b.callStatus(t, http.MethodPost, "/v1/subscriptions", body)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "billing_anchor", problem["errors"].([]any)[0].(map[string]any)["field"])
	delete(body, "billing_anchor")
	body["trial_end"] = start.Add(time.Hour).Format(time.RFC3339)
	status, problem = b.callStatus(t, http.MethodPost, "/v1/subscriptions", body)
	require.Equal(t, http.StatusBadRequest, status)
	require.Len(t, problem["errors"], 2, "both named: %v", problem)
	delete(body, "trial_end")

	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)
	id := sub["id"].(string)
	trialEnd := start.AddDate(0, 0, 7).UTC()
	require.Equal(t, "trialing", sub["status"])
	require.Equal(t, trialEnd.Format(time.RFC3339Nano), sub["trial_end"])
	require.Equal(t, sub["trial_end"], sub["billing_anchor"])
	require.Equal(t, sub["trial_end"], sub["next_charge_at"])
	status, problem = b.callStatus(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", map[string]any{})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, problem["detail"], "a trial charges nothing; cancel it or end it")

	events := func(typ string) int {
		return len(b.call(t, http.MethodGet, "/v1/events?type="+typ+"&object_id="+id, nil)["data"].([]any))
	}
	scanBoth := func() {
		b.waitJobsIdle(t, renewals.ScanArgs{}.Kind())
		defer b.waitJobsIdle(t, renewals.ScanArgs{}.Kind())
		var wg sync.WaitGroup
		for _, nd := range b.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := nd.svc.Renewals.Scan(context.Background(), b.clockNow(t))
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
	}
	scanBoth()
	require.Zero(t, events("subscription.trial_will_end"), "a week ahead")
	require.Empty(t, b.charges(t, id))

	b.advance(t, "100h") // 68 h before the trial's end: the notice is late
	scanBoth()
	scanBoth()
	require.Equal(t, 1, events("subscription.trial_will_end"))
	require.Empty(t, b.charges(t, id), "nothing is charged during the trial")

	b.advance(t, "72h") // past the trial's end
	scanBoth()
	cs := b.waitCharges(t, id, 1, "succeeded")
	require.Equal(t, trialEnd.Format("2006-01-02"), cs[0]["period_key"])
	scanBoth()
	require.Len(t, b.charges(t, id), 1)
	got := b.call(t, http.MethodGet, "/v1/subscriptions/"+id, nil)
	require.Equal(t, "active", got["status"])
	require.Equal(t, trialEnd.AddDate(0, 1, 0).Format(time.RFC3339Nano), got["next_charge_at"])
	require.Equal(t, 1, events("subscription.trial_ended"))
	require.Equal(t, 1, events("subscription.trial_will_end"))
	captures := 0
	for _, e := range b.ledger(t, "sim1") {
		if e.Op == "capture" && e.Status == "succeeded" && len(e.IdempotencyKey) > len(id) && e.IdempotencyKey[:len(id)] == id {
			captures++
		}
	}
	require.Equal(t, 1, captures, "the first period is captured once")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(c, map[string]int{"subscription.trial_will_end": 1, "subscription.trial_ended": 1, "charge.succeeded": 1}, delivered)
	}, 10*time.Second, 20*time.Millisecond)
}

// Ending a trial now (the update endpoint's trial_end "now") through the
// use case, on a node's own wiring: the first period begins now and is
// captured once, however often it is asked; a second node's scans find
// nothing more to do.
func TestEndTrialNowCapturesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	body := subscriptionBody("tok_ok_visa", "week")
	body["trial_end"] = b.clockNow(t).Add(30 * 24 * time.Hour).Format(time.RFC3339)
	id := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)

	r := b.nodes[0].svc.Renewals
	uses := &usecases.Service{Pool: r.Pool, Subscriptions: r.Subscriptions, Renewals: r, Clock: r.Clock}
	caller := usecases.Caller{Actor: subscriptions.Actor{ID: "e2e", Role: "support"}}
	b.advance(t, "50h")
	now := b.clockNow(t)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pgx.BeginFunc(context.Background(), r.Pool, func(tx pgx.Tx) error {
				sub, err := uses.EndTrial(context.Background(), tx, caller, uuid.MustParse(id))
				if err == nil && sub.Status != subscriptions.Active {
					t.Errorf("status %s after ending the trial", sub.Status)
				}
				return err
			})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	cs := b.waitCharges(t, id, 1, "succeeded")
	require.Equal(t, now.Format("2006-01-02"), cs[0]["period_key"])
	got := b.call(t, http.MethodGet, "/v1/subscriptions/"+id, nil)
	require.Equal(t, "active", got["status"])
	require.Equal(t, now.Format(time.RFC3339Nano), got["trial_end"], "the trial ended now")
	require.Equal(t, now.Format(time.RFC3339Nano), got["billing_anchor"])
	_, err := b.nodes[1].svc.Renewals.Scan(context.Background(), now)
	require.NoError(t, err)
	require.Len(t, b.charges(t, id), 1)
	require.Len(t, b.call(t, http.MethodGet, "/v1/events?type=subscription.trial_ended&object_id="+id, nil)["data"].([]any), 1)
}
