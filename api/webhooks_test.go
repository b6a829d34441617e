package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const publicHook = "https://93.184.216.34/hooks/rebill" // a public address: no DNS needed

// The secret is shown once: a replay of the creation returns the
// endpoint without it, and no read shows it.
func TestWebhookEndpointLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"url":"` + publicHook + `","events":["charge.succeeded","subscription.paused"],"description":"billing team"}`
	res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "wh-1", body)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	ep := res.json(t)
	require.Regexp(t, `^whsec_[0-9a-f]{48}$`, ep["secret"])
	require.Equal(t, "enabled", ep["status"])
	id := ep["id"].(string)

	replay := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "wh-1", body)
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.NotContains(t, replay.json(t), "secret")
	require.Equal(t, id, replay.json(t)["id"])

	// Stored encrypted, under a key id.
	var sealed string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT secret FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed))
	require.NotContains(t, sealed, ep["secret"].(string)[6:])
	require.Regexp(t, `^k[0-9a-f]{8}:`, sealed)

	support := b.newKey(t, "support", "")
	customer := b.newKey(t, "customer", "cust-1")
	got := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id, support, "", "")
	require.Equal(t, http.StatusOK, got.status)
	require.NotContains(t, got.json(t), "secret")
	list := b.do(t, http.MethodGet, "/v1/webhook-endpoints", support, "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Len(t, list.json(t)["data"], 1)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/webhook-endpoints", customer, "", "").status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/webhook-endpoints", support, "wh-2", body).status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/disable", support, "d-0", `{}`).status)

	disabled := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/disable", adminKey, "d-1", `{}`)
	require.Equal(t, http.StatusOK, disabled.status, string(disabled.body))
	require.Equal(t, "disabled", disabled.json(t)["status"])
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/disable", adminKey, "d-2", `{}`).status)

	// A redelivery: unknown event 404; to a disabled endpoint 409.
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "s-1", createBody).status)
	events := b.do(t, http.MethodGet, "/v1/events", adminKey, "", "").json(t)["data"].([]any)
	eventID := events[0].(map[string]any)["id"].(string)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/redeliver", adminKey, "r-1",
		`{"event_id":"evt_00000000-0000-0000-0000-000000000000"}`).status)
	require.Equal(t, http.StatusConflict, b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/redeliver", adminKey, "r-2",
		`{"event_id":"`+eventID+`"}`).status)
	enabled := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/enable", adminKey, "e-1", `{}`)
	require.Equal(t, "enabled", enabled.json(t)["status"])
	redelivered := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/redeliver", adminKey, "r-3", `{"event_id":"`+eventID+`"}`)
	require.Equal(t, http.StatusAccepted, redelivered.status, string(redelivered.body))

	deliveries := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id+"/deliveries", support, "", "")
	require.Equal(t, http.StatusOK, deliveries.status)
	require.Empty(t, deliveries.json(t)["data"])
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/webhook-endpoints/00000000-0000-0000-0000-000000000000", support, "", "").status)
}

// Outside dev mode only https to public addresses; unknown event types
// are refused.
func TestWebhookEndpointRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tc := range []struct{ url, events string }{
		{"http://93.184.216.34/hook", `["*"]`},
		{"https://127.0.0.1/hook", `["*"]`},
		{"https://localhost:8443/hook", `["*"]`}, // resolves to loopback
		{"https://10.1.2.3/hook", `["*"]`},
		{"https://169.254.169.254/latest/meta-data", `["*"]`},
		{"https://[::1]/hook", `["*"]`},
		{"https://[::ffff:192.168.1.1]/hook", `["*"]`},
		{"https://user:pw@93.184.216.34/hook", `["*"]`},
		{"/relative", `["*"]`},
		{publicHook, `["charge.exploded"]`},
		{publicHook, `[]`},
		{publicHook, `["*","charge.succeeded"]`},
	} {
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "refused-"+string(rune('a'+i)),
			`{"url":"`+tc.url+`","events":`+tc.events+`}`)
		require.Equal(t, http.StatusBadRequest, res.status, "%s %s: %s", tc.url, tc.events, res.body)
	}

	dev := setup(t, setupOpts{lease: time.Minute, allowPrivate: true})
	res := dev.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "dev-1", `{"url":"http://127.0.0.1:9/hook","events":["*"]}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
}
