package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/metrics"
)

// With REBILL_EVENTS_RETENTION set, the leader runs events_retention on
// start; once the service clock is past the retention, the job deletes
// the old events with their delivery attempts (GET /v1/events/{id} is
// 404) and keeps the recent ones.
func TestEventsRetentionJobDeletesOldEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_EVENTS_RETENTION": "396d"})
	ctx := context.Background()
	count := func(query string, args ...any) int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, query, args...).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM river_job WHERE kind = 'events_retention' AND state = 'completed'`) > 0
	}, 20*time.Second, 50*time.Millisecond, "the leader runs the retention on start")

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": receiver.URL, "events": []string{"*"}})
	old := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, old, 1, "succeeded")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+old+"/cancel", map[string]any{})
	var oldIDs []string
	for _, e := range b.call(t, http.MethodGet, "/v1/events?object_id="+old, nil)["data"].([]any) {
		oldIDs = append(oldIDs, e.(map[string]any)["id"].(string))
	}
	require.Len(t, oldIDs, 3, "created, succeeded, cancelled")
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM webhook_attempts WHERE outcome = 'delivered'`) == 3 &&
			count(`SELECT count(*) FROM river_job WHERE kind = 'webhook_deliver' AND finalized_at IS NULL`) == 0
	}, 20*time.Second, 50*time.Millisecond, "the old events are delivered")

	b.advance(t, "9600h")
	recent := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, recent, 1, "succeeded")
	deleted := testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableEvents))
	res, err := b.nodes[0].svc.River.Insert(ctx, notify.RetentionArgs{}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, res.Job.ID) == 1
	}, 20*time.Second, 50*time.Millisecond)

	for _, id := range oldIDs {
		status, _ := b.callStatus(t, http.MethodGet, "/v1/events/"+id, nil)
		require.Equal(t, http.StatusNotFound, status, id)
	}
	var oldUUIDs []uuid.UUID
	for _, id := range oldIDs {
		u, ok := notify.ParseID(id)
		require.True(t, ok, id)
		oldUUIDs = append(oldUUIDs, u)
	}
	require.Zero(t, count(`SELECT count(*) FROM webhook_attempts WHERE event_id = ANY($1)`, oldUUIDs))
	events := b.call(t, http.MethodGet, "/v1/events?object_id="+recent, nil)["data"].([]any)
	require.Len(t, events, 2, "the recent subscription's events stay")
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM webhook_attempts a JOIN events e ON e.id = a.event_id
			WHERE e.object_id::text = $1 AND a.outcome = 'delivered'`, recent) >= 1
	}, 20*time.Second, 50*time.Millisecond, "the recent events' deliveries stay")
	require.GreaterOrEqual(t, testutil.ToFloat64(metrics.RetentionDeleted.WithLabelValues(notify.TableEvents))-deleted, 3.0)
}
