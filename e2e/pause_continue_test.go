package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A monthly subscription paused ten days into its charged period with
// on_resume continue_period, paused 45 days (across a period start), then
// resumed by a person or by its resume_at: nothing is charged while paused
// or at the resume, the next charge falls exactly the time kept after the
// resume, and it is one capture: two at the gateway in all.
func TestPauseThatContinuesThePeriod(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"resume", "resume_at"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, nil)
			sub := b.createSubscription(t, "tok_ok_continue_"+how, "month")
			b.waitCharges(t, sub, 1, "succeeded")
			created := b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)
			periodEnd := parseTime(t, created["next_charge_at"])

			b.advance(t, "240h")
			pausedAt := b.clockNow(t)
			kept := periodEnd.Sub(pausedAt)
			require.InDelta(t, float64(20*24*time.Hour), float64(kept), float64(2*24*time.Hour), "about 20 days of the month left")
			body := map[string]any{"on_resume": "continue_period"}
			resumeAt := pausedAt.Add(45 * 24 * time.Hour)
			if how == "resume_at" {
				body["resume_at"] = resumeAt.Format(time.RFC3339Nano)
			}
			paused := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", body)
			require.Equal(t, "paused", paused["status"])
			require.Nil(t, paused["next_charge_at"])
			require.Equal(t, "continue_period", paused["pause"].(map[string]any)["on_resume"])

			var next time.Time
			if how == "resume" {
				b.advance(t, "1080h")
				b.scanNow(t)
				require.Len(t, b.charges(t, sub), 1, "nothing charged while paused")
				resumed := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
				require.Equal(t, "active", resumed["status"])
				next = parseTime(t, resumed["next_charge_at"])
				require.Equal(t, b.clockNow(t).Add(kept), next)
			} else {
				b.advance(t, "1128h") // two days past resume_at: the scan resumes as of resume_at
				require.Eventually(t, func() bool {
					return b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"] == "active"
				}, 30*time.Second, 20*time.Millisecond)
				next = parseTime(t, b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["next_charge_at"])
				require.Equal(t, resumeAt.Add(kept), next)
			}
			b.scanNow(t)
			require.Len(t, b.charges(t, sub), 1, "nothing charged at the resume")

			b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": next.Add(-time.Minute).Format(time.RFC3339Nano)})
			b.scanNow(t)
			require.Len(t, b.charges(t, sub), 1, "not before the time kept has run out")

			b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": next.Format(time.RFC3339Nano)})
			cs := b.waitCharges(t, sub, 2, "succeeded")
			require.Equal(t, next.Format(time.DateOnly), cs[0]["period_key"])
			b.scanNow(t)
			require.Len(t, b.charges(t, sub), 2)

			captures := 0
			for _, c := range cs {
				captures += opsFor(b.ledger(t, "sim1"), sub+":"+c["period_key"].(string))["capture:succeeded"]
			}
			require.Equal(t, 2, captures)
			require.Equal(t, 2, opsFor(b.ledger(t, "sim1"), sub+":")["capture:succeeded"], "two captures at the gateway in all")
		})
	}
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "%v is not a time", v)
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

// A cancel scheduled at period end survives a pause that continues its
// period: the interrupted period's end passes while paused without a
// cancel, the resume is allowed, and the subscription is cancelled as of
// the resume plus the time kept, with no charge after the first.
func TestPauseThatContinuesThePeriodKeepsTheScheduledCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_continue_cancel", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	periodEnd := parseTime(t, b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["next_charge_at"])
	b.advance(t, "240h")
	kept := periodEnd.Sub(b.clockNow(t))
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{"on_resume": "continue_period"})
	b.advance(t, "1080h")
	b.scanNow(t)
	scheduled := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{"at_period_end": true})
	require.Equal(t, "paused", scheduled["status"], "the period's clock stopped at the pause: the cancel is scheduled")
	require.Equal(t, true, scheduled["cancel_at_period_end"])

	resumed := b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{})
	require.Equal(t, "active", resumed["status"])
	end := b.clockNow(t).Add(kept)
	require.Equal(t, end, parseTime(t, resumed["next_charge_at"]))

	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": end.Add(time.Hour).Format(time.RFC3339Nano)})
	b.scanNow(t)
	got := b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)
	require.Equal(t, "cancelled", got["status"])
	require.Equal(t, end, parseTime(t, got["cancelled_at"]))
	require.Len(t, b.charges(t, sub), 1)
	require.Equal(t, 1, opsFor(b.ledger(t, "sim1"), sub+":")["capture:succeeded"])
}
