package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// on_resume over HTTP: a bad value is a 400 naming it and changes
// nothing; the pause shows its mode while paused (next_charge_at null);
// a repeat without it changes nothing, one with another mode changes the
// pause; a resume of continue_period charges next exactly the time kept
// later and shows no pause.
func TestPauseOnResumeOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "s-1", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	sub := res.json(t)
	id := sub["id"].(string)
	periodEnd, err := time.Parse(time.RFC3339, sub["next_charge_at"].(string))
	require.NoError(t, err)

	for i, bad := range []string{`{"on_resume":"continue"}`, `{"on_resume":""}`, `{"on_resume":7}`, `{"on_resume":null,"x":1}`} {
		res := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "bad-"+string(rune('a'+i)), bad)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", bad, res.body)
		if i < 3 {
			require.Contains(t, string(res.body), `"field":"on_resume"`, bad)
		}
	}
	require.Equal(t, "active", b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)["status"])

	b.clock.Advance(10 * 24 * time.Hour)
	paused := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-1", `{"on_resume":"continue_period"}`)
	require.Equal(t, http.StatusOK, paused.status, string(paused.body))
	require.Nil(t, paused.json(t)["next_charge_at"])
	require.Equal(t, "continue_period", paused.json(t)["pause"].(map[string]any)["on_resume"])
	kept := periodEnd.Sub(b.clock.Now())

	again := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-2", `{}`)
	require.Equal(t, http.StatusOK, again.status, string(again.body))
	require.Equal(t, paused.json(t), again.json(t), "a repeat without on_resume changes nothing")

	b.clock.Advance(40 * 24 * time.Hour)
	resumed := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/resume", adminKey, "r-1", `{}`)
	require.Equal(t, http.StatusOK, resumed.status, string(resumed.body))
	require.Nil(t, resumed.json(t)["pause"])
	require.Equal(t, b.clock.Now().Add(kept).Format(time.RFC3339), resumed.json(t)["next_charge_at"])
	require.Equal(t, resumed.json(t)["next_charge_at"], resumed.json(t)["billing_anchor"])
	require.Zero(t, b.count(t, "charges")-1, "nothing charged at the resume (the create's first period only)")

	start := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-3", `{"resume_at":"2027-06-01T00:00:00Z"}`)
	require.Equal(t, http.StatusOK, start.status, string(start.body))
	require.Equal(t, "start_new_period", start.json(t)["pause"].(map[string]any)["on_resume"], "the default")
	switched := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-4", `{"on_resume":"continue_period"}`)
	require.Equal(t, http.StatusOK, switched.status, string(switched.body))
	require.Equal(t, "continue_period", switched.json(t)["pause"].(map[string]any)["on_resume"])
	require.Equal(t, "2027-06-01T00:00:00Z", switched.json(t)["pause"].(map[string]any)["resume_at"])
}
