package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A roll shows the new secret once (a replay of the request omits it and
// rolls nothing), keeps the old one signing for expires_in (default 24h),
// and is admin's only.
func TestRollWebhookSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "wh-roll", `{"url":"`+publicHook+`","events":["*"]}`)
	require.Equal(t, http.StatusCreated, created.status, string(created.body))
	ep := created.json(t)
	id, first := ep["id"].(string), ep["secret"].(string)
	require.Nil(t, ep["previous_secret_expires_at"])
	path := "/v1/webhook-endpoints/" + id + "/roll-secret"

	support := b.newKey(t, "support", "")
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, path, support, "roll-0", `{}`).status)

	rolled := b.do(t, http.MethodPost, path, adminKey, "roll-1", `{"expires_in":"2h"}`)
	require.Equal(t, http.StatusOK, rolled.status, string(rolled.body))
	second := rolled.json(t)["secret"].(string)
	require.Regexp(t, `^whsec_[0-9a-f]{48}$`, second)
	require.NotEqual(t, first, second)
	expires, err := time.Parse(time.RFC3339Nano, rolled.json(t)["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), expires, time.Minute)

	replay := b.do(t, http.MethodPost, path, adminKey, "roll-1", `{"expires_in":"2h"}`)
	require.Equal(t, http.StatusOK, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.NotContains(t, replay.json(t), "secret", "shown once")
	var sealed string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT secret FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed))
	require.Regexp(t, `^k[0-9a-f]{8}:`, sealed)
	require.NotContains(t, sealed, second[6:])

	byDefault := b.do(t, http.MethodPost, path, adminKey, "roll-2", ``)
	require.Equal(t, http.StatusOK, byDefault.status, string(byDefault.body))
	expires, err = time.Parse(time.RFC3339Nano, byDefault.json(t)["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), expires, time.Minute, "24h by default")
	now := b.do(t, http.MethodPost, path, adminKey, "roll-3", `{"expires_in":"0s"}`)
	require.Equal(t, http.StatusOK, now.status, string(now.body))
	require.Nil(t, now.json(t)["previous_secret_expires_at"])
	require.Contains(t, now.json(t), "previous_secret_expires_at")
	got := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id, support, "", "")
	require.NotContains(t, got.json(t), "secret")

	for i, body := range []string{`{"expires_in":"169h"}`, `{"expires_in":"-1s"}`, `{"expires_in":"1 day"}`, `{"expires_in":86400}`, `{"expires":"1h"}`} {
		res := b.do(t, http.MethodPost, path, adminKey, "roll-bad-"+string(rune('a'+i)), body)
		require.Equal(t, http.StatusBadRequest, res.status, body)
	}
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPost,
		"/v1/webhook-endpoints/00000000-0000-0000-0000-000000000000/roll-secret", adminKey, "roll-404", `{}`).status)
}
