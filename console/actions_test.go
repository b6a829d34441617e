package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func subscriptionEvents(t *testing.T, n node, sub, typ string) int {
	t.Helper()
	return count(t, n.pool, `SELECT count(*) FROM subscription_events WHERE subscription_id = $1 AND type = $2`, sub, typ)
}

func status(t *testing.T, n node, sub string) string {
	t.Helper()
	var s string
	require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT status FROM subscriptions WHERE id = $1`, sub).Scan(&s))
	return s
}

func TestConsoleActions(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, supportID := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-console")
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub

	t.Run("search by customer and by id", func(t *testing.T) {
		res := u.get("/console/search?q=cust-console")
		require.Equal(t, http.StatusOK, res.status)
		require.Contains(t, res.body, `<h2 id="subscriptions">Subscriptions</h2>`)
		require.Contains(t, res.body, `<h2 id="enrollments">Enrollments</h2>`)
		require.Contains(t, res.body, `href="/console/subscriptions/`+sub+`"`)
		require.Contains(t, res.body, "15.00 USD")
		res = u.get("/console/search?q=" + sub)
		require.Equal(t, http.StatusSeeOther, res.status)
		require.Equal(t, page, res.header.Get("Location"))
		require.Equal(t, http.StatusNotFound, u.get("/console/search?q=nobody-at-all").status)
		res = u.get("/console/search?q=4242424242424242")
		require.Equal(t, http.StatusUnprocessableEntity, res.status)
		require.NotContains(t, res.body, "4242424242424242")
	})

	t.Run("CSRF missing, wrong or cross-site changes nothing", func(t *testing.T) {
		action, fields := form(t, u.get(page).body, "Pause")
		require.Equal(t, "/console/subscriptions/"+sub+"/pause", action)
		for name, tc := range map[string]struct {
			form   url.Values
			header map[string]string
		}{
			"missing":    {url.Values{"form_id": {fields.Get("form_id")}}, nil},
			"wrong":      {url.Values{"form_id": {fields.Get("form_id")}, "csrf": {otherToken(fields.Get("csrf"))}}, nil},
			"cross-site": {fields, map[string]string{"Origin": "https://evil.example"}},
			"fetch-site": {fields, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		} {
			res := u.do(http.MethodPost, action, tc.form, tc.header)
			require.Equal(t, http.StatusForbidden, res.status, name)
			require.Contains(t, res.body, "Invalid form token", name)
		}
		require.Equal(t, "active", status(t, n, sub))
		require.Equal(t, 0, subscriptionEvents(t, n, sub, "paused"))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
	})

	t.Run("GET never changes state", func(t *testing.T) {
		for _, path := range []string{page + "/pause", page + "/resume", page + "/cancel?at_period_end=false",
			"/console/logout", "/console/settings?tz=Asia/Tokyo"} {
			u.get(path)
			u.do(http.MethodHead, path, nil, nil)
		}
		require.Equal(t, "active", status(t, n, sub))
		require.Equal(t, 1, count(t, n.pool, `SELECT count(*) FROM subscription_events WHERE subscription_id = $1`, sub))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_sessions WHERE time_zone <> 'UTC'`))
		require.Equal(t, http.StatusOK, u.get("/console/").status, "a GET logged out")
	})

	t.Run("a resume day in the past is refused on the page", func(t *testing.T) {
		action, fields := form(t, u.get(page).body, "Pause")
		fields.Set("resume_at", "2001-02-03")
		res := u.post(action, fields)
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Contains(t, res.body, `<p role="alert" class="alert">Not done: resume_at`)
		require.Contains(t, res.body, `<dd id="status">active</dd>`)
		fields.Set("resume_at", "next tuesday")
		res = u.post(action, fields)
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Contains(t, res.body, "resume_at must be a day as YYYY-MM-DD")
		require.Equal(t, "active", status(t, n, sub))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
	})

	t.Run("pause twice with one form acts once, as support", func(t *testing.T) {
		action, fields := form(t, u.get(page).body, "Pause")
		first := u.post(action, fields)
		require.Equal(t, http.StatusSeeOther, first.status, first.body)
		second := u.post(action, fields)
		require.Equal(t, http.StatusSeeOther, second.status, "a resubmitted form is an error: %s", second.body)
		require.Equal(t, first.header.Get("Location"), second.header.Get("Location"))
		require.Equal(t, 1, subscriptionEvents(t, n, sub, "paused"))
		require.Equal(t, "paused", status(t, n, sub))
		var role, actor string
		require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT actor_role, actor_id FROM subscription_events
			WHERE subscription_id = $1 AND type = 'paused'`, sub).Scan(&role, &actor))
		require.Equal(t, "support", role)
		require.Equal(t, supportID, actor)

		shown := u.get(first.header.Get("Location"))
		require.Contains(t, shown.body, `<p role="status" class="flash"><bdi>Paused`)
		require.Contains(t, shown.body, `<dd id="status">paused</dd>`)
		require.Contains(t, shown.body, "subscription.paused")
		require.Contains(t, shown.body, "support <code><bdi>"+supportID)

		action, fields = form(t, shown.body, "Resume")
		require.Equal(t, http.StatusSeeOther, u.post(action, fields).status)
		require.Equal(t, "active", status(t, n, sub))
		require.Equal(t, 1, subscriptionEvents(t, n, sub, "resumed"))
	})

	t.Run("a concurrent double cancel acts once", func(t *testing.T) {
		active := u.get(page).body
		pauseAction, pauseFields := form(t, active, "Pause")
		require.Contains(t, active, `<a class="button danger" href="`+page+`/cancel">Cancel now…</a>`)
		// Cancel now is a second step: the form on the subscription's page
		// cannot do it without the confirmation page's.
		action, fields := form(t, active, "Cancel at period end")
		fields.Set("at_period_end", "false")
		res := u.post(action, fields)
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Contains(t, res.body, "cancelling now must be confirmed")
		require.Contains(t, res.body, `<dd id="status">active</dd>`, "refused on the subscription's page")
		require.Equal(t, "active", status(t, n, sub))

		confirm := u.get(page + "/cancel")
		require.Equal(t, http.StatusOK, confirm.status)
		require.Contains(t, confirm.body, "It cannot be undone.")
		require.Contains(t, confirm.body, `<button type="submit" class="danger">Yes, cancel now</button>`)
		require.Contains(t, confirm.body, `<a href="`+page+`">No, keep the subscription</a>`)
		action, fields = form(t, confirm.body, "Yes, cancel now")
		require.Equal(t, "false", fields.Get("at_period_end"))
		require.Equal(t, "yes", fields.Get("confirmed"))
		var wg sync.WaitGroup
		statuses := make([]int, 4)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = u.post(action, fields).status
			}()
		}
		wg.Wait()
		for _, s := range statuses {
			require.Equal(t, http.StatusSeeOther, s)
		}
		require.Equal(t, 1, subscriptionEvents(t, n, sub, "cancelled"))
		require.Equal(t, "cancelled", status(t, n, sub))
		require.Equal(t, 1, count(t, n.pool, `SELECT count(*) FROM console_actions WHERE form_id = $1`, fields.Get("form_id")))

		// A cancelled subscription offers nothing.
		cancelled := u.get(page).body
		for _, label := range []string{">Pause</button>", ">Resume</button>", "Cancel now…", ">Cancel at period end</button>"} {
			require.NotContains(t, cancelled, label)
		}
		// A refused action (a form from before) is answered on the page it
		// came from, with why, and changes nothing.
		res = u.post(pauseAction, pauseFields)
		fields = pauseFields
		require.Equal(t, http.StatusConflict, res.status)
		require.Contains(t, res.body, `<p role="alert" class="alert">Not done: subscription cannot move from cancelled to paused`)
		require.Contains(t, res.body, `<dd id="status">cancelled</dd>`, "the subscription's page")
		require.Equal(t, 1, subscriptionEvents(t, n, sub, "paused"), "a cancelled subscription paused")
		require.Equal(t, "cancelled", status(t, n, sub))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions WHERE form_id = $1`, fields.Get("form_id")))

	})

	t.Run("another key cannot replay a form", func(t *testing.T) {
		other, _ := n.newKey(t, "support", "")
		v := newBrowser(t, n.url)
		v.login(other)
		var formID string
		require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT form_id FROM console_actions LIMIT 1`).Scan(&formID))
		_, fields := form(t, v.get("/console/settings").body, "Log out")
		res := v.post(page+"/pause", url.Values{"csrf": {fields.Get("csrf")}, "form_id": {formID}})
		require.Equal(t, http.StatusForbidden, res.status)
		require.NotContains(t, v.get("/console/?done="+formID).body, `role="status"`, "another key's result shown")
	})
}

func TestSupportCannotDoWhatOnlyAdminMay(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	admin := newBrowser(t, n.url)
	admin.login(adminKey)
	u := newBrowser(t, n.url)
	u.login(support)

	require.Equal(t, http.StatusForbidden, u.get("/console/sessions").status)
	require.NotContains(t, u.get("/console/").body, `href="/console/sessions"`)
	_, fields := form(t, u.get("/console/").body, "Log out")
	res := u.post("/console/sessions/bootstrap-admin/end", url.Values{"csrf": {fields.Get("csrf")}, "form_id": {strings.Repeat("a", 43)}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, http.StatusOK, admin.get("/console/").status, "support ended the admin's session")

	// The admin sees the sessions and ends support's.
	sessions := admin.get("/console/sessions")
	require.Equal(t, http.StatusOK, sessions.status)
	var supportID string
	require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT key_id FROM console_sessions WHERE role = 'support'`).Scan(&supportID))
	action, fields := form(t, sessions.body, "End sessions of "+supportID)
	require.Equal(t, http.StatusSeeOther, admin.post(action, fields).status)
	require.Equal(t, http.StatusSeeOther, u.get("/console/").status, "an ended session still works")
}

func TestConsoleCookieIsNotAnAPIKey(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	u := newBrowser(t, n.url)
	u.login(adminKey)
	c := u.cookie()
	require.NotNil(t, c)
	for _, path := range []string{"/v1/subscriptions", "/riverui/", "/v1/review-queue"} {
		req, err := http.NewRequest(http.MethodGet, n.url+path, nil)
		require.NoError(t, err)
		req.AddCookie(c)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, path)
	}
}

func TestTimeZoneAndBillEvidence(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	sub := n.createSubscription(t, "cust-tz")
	u := newBrowser(t, n.url)
	u.login(adminKey)
	settings := u.get("/console/settings").body
	require.Contains(t, settings, `<select id="tz" name="tz">`)
	_, fields := form(t, settings, "Save")
	fields.Set("tz", "Not/AZone")
	require.Equal(t, http.StatusUnprocessableEntity, u.post("/console/settings", fields).status)
	fields.Set("tz", "Europe/Moscow")
	require.Equal(t, http.StatusSeeOther, u.post("/console/settings", fields).status)
	page := u.get("/console/subscriptions/" + sub).body
	require.Contains(t, page, " MSK</time> <span class=\"utc\">(")
	require.Contains(t, page, " UTC)</span>")

	// Confirming a bill above the cap needs evidence; an unknown bill is
	// not found; neither leaves a record.
	_, fields = form(t, page, "Pause")
	enrollment := "/console/enrollments/00000000-0000-0000-0000-000000000001/bills/b-1/confirm"
	res := u.post(enrollment, url.Values{"csrf": {fields.Get("csrf")}, "form_id": {fields.Get("form_id")}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "evidence is required")
	res = u.post(enrollment, url.Values{"csrf": {fields.Get("csrf")}, "form_id": {fields.Get("form_id")}, "evidence": {"call on 3 March"}})
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
}

// otherToken is token with its first character changed, so a test's
// wrong token never happens to be the right one.
func otherToken(token string) string {
	if strings.HasPrefix(token, "x") {
		return "y" + token[1:]
	}
	return "x" + token[1:]
}
