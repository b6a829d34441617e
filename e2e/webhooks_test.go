package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
)

// A node delivers a signed charge.succeeded to an endpoint on loopback
// (dev mode allows it), once, and the event log has one of each event.
func TestChargeSucceededIsDeliveredSigned(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	var mu sync.Mutex
	var bodies [][]byte
	var sigs []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, sigs = append(bodies, body), append(sigs, r.Header.Get(notify.HeaderSignature))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	ep := b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": receiver.URL, "events": []string{"*"}})
	secret := ep["secret"].(string)

	sub := b.createSubscription(t, "tok_ok_visa", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 2
	}, 10*time.Second, 20*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	var types []string
	for i, body := range bodies {
		require.NoError(t, notify.Verify(secret, sigs[i], body, time.Now(), 5*time.Minute))
		var e struct {
			Type string `json:"type"`
			Data struct {
				Object map[string]any `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &e))
		types = append(types, e.Type)
		if e.Type == "charge.succeeded" {
			require.Equal(t, cs[0]["id"], e.Data.Object["id"])
			require.Equal(t, "succeeded", e.Data.Object["status"])
		}
	}
	require.ElementsMatch(t, []string{"subscription.created", "charge.succeeded"}, types)

	events := b.call(t, http.MethodGet, "/v1/events?object_id="+sub, nil)["data"].([]any)
	require.Len(t, events, 2, "created and succeeded, once each: %v", events)
}

// The scan publishes charge.upcoming 72h before a renewal, once however
// often it runs, and late (once) when the dev clock jumps past that time.
func TestUpcomingNoticeOnceThroughTheScan(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_visa", "week")
	b.waitCharges(t, sub, 1, "succeeded")
	upcoming := func() int {
		return len(b.call(t, http.MethodGet, "/v1/events?type=charge.upcoming&object_id="+sub, nil)["data"].([]any))
	}
	b.scanNow(t)
	require.Zero(t, upcoming(), "a week ahead")
	b.advance(t, "100h") // the renewal is 68h ahead: the notice is late
	b.scanNow(t)
	b.scanNow(t)
	require.Equal(t, 1, upcoming())
	b.advance(t, "24h")
	b.scanNow(t)
	require.Equal(t, 1, upcoming())
}
