package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The pause form offers what the resume does: left as it is, a new period
// at the resume; "continue the period" keeps the paid time left, which the
// page then shows. A mode that is not one is refused on the page.
func TestConsolePauseChoosesOnResume(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-console-pause")
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub
	body := u.get(page).body
	require.Contains(t, body, `<input type="radio" id="on_resume_new" name="on_resume" value="start_new_period" checked>`)
	require.Contains(t, body, `<input type="radio" id="on_resume_continue" name="on_resume" value="continue_period"`)

	action, fields := form(t, body, "Pause")
	fields.Set("on_resume", "keep_it")
	res := u.post(action, fields)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, `<p role="alert" class="alert">Not done: on_resume`)
	require.Equal(t, "active", status(t, n, sub))

	action, fields = form(t, u.get(page).body, "Pause")
	fields.Set("on_resume", "continue_period")
	res = u.post(action, fields)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	var onResume string
	var left time.Duration
	var leftUS int64
	require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT on_resume, paused_time_left_us FROM subscriptions WHERE id = $1`,
		sub).Scan(&onResume, &leftUS))
	left = time.Duration(leftUS) * time.Microsecond
	require.Equal(t, "continue_period", onResume)
	require.Greater(t, left, 27*24*time.Hour, "a month's charged period, paused at once")
	shown := u.get(res.header.Get("Location")).body
	require.Contains(t, shown, `<dd id="on-resume">continues the period: the next charge falls `)
	require.Contains(t, shown, " after the resume</dd>")
}
