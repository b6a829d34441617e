//go:build browser

package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// requireRow fails unless one table row of the page contains every part.
func (b *tab) requireRow(parts ...string) string {
	b.t.Helper()
	rows := b.rows()
	for _, r := range rows {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(r, p)
		}
		if all {
			return r
		}
	}
	b.t.Fatalf("no table row holds %q; rows:\n%s", parts, strings.Join(rows, "\n"))
	return ""
}

// countRows counts the table rows of the page that contain part.
func (b *tab) countRows(part string) int {
	b.t.Helper()
	n := 0
	for _, r := range b.rows() {
		if strings.Contains(r, part) {
			n++
		}
	}
	return n
}

// A support key and an admin key log in and reach the home page; the
// session lives in an HttpOnly, SameSite=Strict cookie that is not the
// key; logging out ends it. A customer key and an unknown key are refused
// and get no session.
func TestLogin(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	_, support := n.createKey("support", "")
	_, customer := n.createKey("customer", "cust-login")

	b := newTab(t, n)
	require.EqualValues(t, http.StatusOK, b.open("/console/"), "no session: the login page")
	require.Equal(t, "/console/login", b.path())
	b.shot("login")
	require.EqualValues(t, http.StatusOK, b.login(support))
	require.Equal(t, "/console/", b.path())
	body := b.body()
	for _, want := range []string{"Search", "Review queue", "Operations", "Log out"} {
		require.Contains(t, body, want)
	}
	var session *network.Cookie
	for _, c := range b.cookies() {
		if c.Name == "rebill_console" {
			session = c
		}
	}
	require.NotNil(t, session, "the console's session cookie")
	require.True(t, session.HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, session.SameSite)
	require.Equal(t, "/console/", session.Path)
	require.NotContains(t, session.Value, support, "the cookie never holds the key")
	require.EqualValues(t, http.StatusOK, b.submit(button("Log out")))
	require.Equal(t, "/console/login", b.path())
	b.open("/console/review")
	require.Equal(t, "/console/login", b.path(), "logged out: the session is gone")

	a := newTab(t, n)
	require.EqualValues(t, http.StatusOK, a.login(adminKey))
	require.Equal(t, "/console/", a.path())
	require.Contains(t, a.body(), "admin")

	c := newTab(t, n)
	require.EqualValues(t, http.StatusForbidden, c.login(customer))
	require.Contains(t, c.body(), "Customer keys cannot use the console")
	c.open("/console/")
	require.Equal(t, "/console/login", c.path(), "a customer key gets no session")

	u := newTab(t, n)
	require.EqualValues(t, http.StatusUnauthorized, u.login("rb_not_a_key_0123456789abcdefghijklmnop"))
	require.Contains(t, u.body(), "Unknown API key")
	u.open("/console/")
	require.Equal(t, "/console/login", u.path())
}

// Search finds a customer's subscriptions and enrollments (and nobody
// else's), and an id goes straight to its page.
func TestSearch(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	_, support := n.createKey("support", "")
	first := n.createSubscription("cust-search", "tok_ok")
	second := n.createSubscription("cust-search", "tok_ok")
	other := n.createSubscription("cust-other", "tok_ok")
	enr := n.createHousingEnrollment("cust-search", 1000000)
	charge := n.waitCharge(first, "succeeded")["id"].(string)

	b := newTab(t, n)
	b.login(support)
	b.shot("home")
	b.do(chromedp.SendKeys(chromedp.ID("q"), "cust-search"))
	require.EqualValues(t, http.StatusOK, b.submit(button("Search")))
	require.Equal(t, "/console/search?q=cust-search", b.path())
	body := b.body()
	require.Contains(t, body, "Subscriptions")
	require.Contains(t, body, "Enrollments")
	hrefs := b.hrefs()
	require.Contains(t, hrefs, "/console/subscriptions/"+first)
	require.Contains(t, hrefs, "/console/subscriptions/"+second)
	require.Contains(t, hrefs, "/console/enrollments/"+enr)
	require.NotContains(t, hrefs, "/console/subscriptions/"+other, "another customer's subscription")
	b.shot("search")

	require.EqualValues(t, http.StatusOK, b.submit(link("/console/subscriptions/"+second)))
	require.Equal(t, "/console/subscriptions/"+second, b.path())

	for id, page := range map[string]string{first: "/console/subscriptions/" + first, charge: "/console/charges/" + charge,
		enr: "/console/enrollments/" + enr} {
		require.EqualValues(t, http.StatusOK, b.open("/console/search?q="+id))
		require.Equal(t, page, b.path(), "an id goes to its page")
		require.Contains(t, b.body(), id)
	}
	b.open("/console/search?q=cust-nobody")
	require.Contains(t, b.body(), "Nothing found")
}

// Pausing and resuming from the subscription page change its status, and
// its events show who did it: the support key, by role and id.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	keyID, support := n.createKey("support", "")
	sub := n.createSubscription("cust-pause", "tok_ok")
	charge := n.waitCharge(sub, "succeeded")

	b := newTab(t, n)
	b.login(support)
	require.EqualValues(t, http.StatusOK, b.open("/console/subscriptions/"+sub))
	require.Equal(t, "active", b.text("#status"))
	require.Equal(t, "visa ending 4242, expires 12/2035 on sim1", b.text("#card"))
	require.Contains(t, b.hrefs(), "/console/charges/"+charge["id"].(string))

	require.EqualValues(t, http.StatusOK, b.submit(button("Pause")))
	require.True(t, strings.HasPrefix(b.path(), "/console/subscriptions/"+sub), b.path())
	require.NotEmpty(t, b.text(`p[role=status]`), "a flash says what was done")
	require.Equal(t, "paused", b.text("#status"))
	b.requireRow("subscription.paused", "support", keyID)
	paused := eventsOf(n.events(sub), "paused")
	require.Len(t, paused, 1)
	require.Equal(t, map[string]any{"id": keyID, "role": "support"}, paused[0]["actor"])
	require.Equal(t, "paused", n.subscription(sub)["status"])

	require.EqualValues(t, http.StatusOK, b.submit(button("Resume")))
	require.Equal(t, "active", b.text("#status"))
	b.requireRow("subscription.resumed", "support", keyID)
	resumed := eventsOf(n.events(sub), "resumed")
	require.Len(t, resumed, 1)
	require.Equal(t, map[string]any{"id": keyID, "role": "support"}, resumed[0]["actor"])
	require.Equal(t, "active", n.subscription(sub)["status"])
	b.shot("subscription")
}

// A double click on "Cancel now" sends the form twice (the node holds the
// first POST until the second arrives, so both reach rebill and run at
// once); the subscription is cancelled once: one event, and at the
// gateway the hold placed meanwhile is voided once and never captured.
func TestDoubleClickCancelActsOnce(t *testing.T) {
	t.Parallel()
	// The gateway takes seconds to place the hold: the cancel arrives
	// while the charge is authorizing.
	n := startDevNode(t, map[string]string{"REBILL_GATEWAY_TIMEOUT": "25s", "REBILL_RESCUE_AFTER": "2m"})
	_, support := n.createKey("support", "")
	b := newTab(t, n)
	b.login(support)
	n.faults(map[string]any{"latency_ms": 12000})
	sub := n.createSubscription("cust-cancel", "tok_ok")
	key := n.waitCharge(sub, "authorizing")["key"].(string)

	b.open("/console/subscriptions/" + sub)
	require.Equal(t, "active", b.text("#status"))
	path := "/console/subscriptions/" + sub + "/cancel"
	// Cancel now asks first, on a page of its own.
	require.EqualValues(t, http.StatusOK, b.submit(link(path)))
	b.doubleSubmit(n, button("Yes, cancel now"), path)
	waitFor(t, "the page shows the subscription cancelled", func() bool {
		return strings.HasPrefix(b.path(), "/console/subscriptions/"+sub) && b.text("#status") == "cancelled"
	}, func() any { return b.path() + ": " + b.body() })
	require.Empty(t, b.text(`p[role=alert]`), "the second submission shows the first one's result, not an error")
	require.Equal(t, 1, b.countRows("subscription.cancelled"))
	n.faults(map[string]any{"latency_ms": 0})

	require.Len(t, eventsOf(n.events(sub), "cancelled"), 1)
	require.Len(t, n.list("/v1/events?type=subscription.cancelled&object_id="+sub), 1)
	n.waitCharge(sub, "voided")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, n.ledgerOps(key))
	require.EqualValues(t, 2, n.postsTo(path))
}

// A charge in review is retried from the review queue and paid: the
// gateway's ledger shows one hold and one capture, and the charge page
// shows it succeeded.
func TestRetryFromReviewQueue(t *testing.T) {
	t.Parallel()
	// A gateway that answers 503 sends a charge to review once it has
	// been unavailable that long.
	n := startDevNode(t, map[string]string{"REBILL_UNAVAILABLE_FOR": "1ms"})
	_, support := n.createKey("support", "")
	n.faults(map[string]any{"down": true})
	sub := n.createSubscription("cust-review", "tok_ok")
	charge := n.waitCharge(sub, "requires_review")
	id, key := charge["id"].(string), charge["key"].(string)
	require.Empty(t, n.ledgerOps(key), "a 503 records nothing")
	n.faults(map[string]any{"down": false})

	b := newTab(t, n)
	b.login(support)
	require.EqualValues(t, http.StatusOK, b.open("/console/review"))
	b.requireRow(id, "requires_review")
	b.shot("review")
	// A double click: both POSTs reach rebill, and the charge is retried
	// once (a second retry of a charge already retried would be refused,
	// or would start a third attempt).
	path := "/console/charges/" + id + "/retry"
	b.doubleSubmit(n, chromedp.Search(fmt.Sprintf(`//tr[@id=%q]//button[normalize-space()='Retry']`, "charge-"+id)), path)
	waitFor(t, "the review queue shows what was done", func() bool {
		return strings.HasPrefix(b.path(), "/console/review") && b.text(`p[role=status]`) != ""
	}, func() any { return b.path() + ": " + b.body() })
	require.Empty(t, b.text(`p[role=alert]`), "the second submission shows the first one's result, not an error")

	n.waitFor("the retried charge is paid", func() bool {
		return n.admin(http.MethodGet, "/v1/charges/"+id, nil)["status"] == "succeeded"
	}, func() any { return n.admin(http.MethodGet, "/v1/charges/"+id, nil) })
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, n.ledgerOps(key))
	require.EqualValues(t, 2, n.admin(http.MethodGet, "/v1/charges/"+id, nil)["attempt_count"], "one retry: attempt 2")

	b.open("/console/charges/" + id)
	waitFor(t, "the charge page shows it paid", func() bool {
		b.open("/console/charges/" + id)
		return strings.Contains(b.body(), "succeeded")
	}, func() any { return b.body() })
	b.open("/console/review")
	require.Zero(t, b.countRows(id), "a paid charge leaves the queue")

	require.EqualValues(t, http.StatusOK, b.open("/console/operations"))
	body := b.body()
	require.Contains(t, body, "sim1")
	require.Contains(t, b.hrefs(), "/riverui/")
	b.shot("operations")
}

// A bill above the enrollment's cap waits for a person: confirming it
// needs evidence (the server refuses an empty one even when the browser's
// check is bypassed), then it is charged once.
func TestConfirmBillAboveCap(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	keyID, support := n.createKey("support", "")
	n.admin(http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2027-03-01T09:00:00Z"})
	enr := n.createHousingEnrollment("cust-cap", 100000)
	bill := "ZHKU-2027-02"
	n.admin(http.MethodPost, "/v1/dev/bill-sources/housing/bills", map[string]any{
		"account_ref": "75ДА533315", "bill_id": bill, "amount": 734500,
		"issued_at": "2027-03-01T08:00:00Z", "due_date": "2027-03-25",
	})
	n.waitFor("the bill waits for confirmation", func() bool { return n.billStatus(enr, bill) == "awaiting_confirmation" },
		func() any { return n.list("/v1/enrollments/" + enr + "/bills") })

	b := newTab(t, n)
	b.login(support)
	require.EqualValues(t, http.StatusOK, b.open("/console/enrollments/"+enr))
	require.Equal(t, "awaiting_confirmation", b.text(".bill-status"))
	b.shot("enrollment")

	// No evidence: the browser would not send the form, a script can.
	b.do(chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('textarea[name=evidence]').forEach(e => e.removeAttribute('required'))`))
	status := b.submit(button("Confirm"))
	require.GreaterOrEqual(t, status, int64(400))
	require.NotEmpty(t, b.text(`p[role=alert]`))
	require.Equal(t, "awaiting_confirmation", n.billStatus(enr, bill), "refused: nothing changed")

	b.open("/console/enrollments/" + enr)
	b.do(chromedp.SendKeys(chromedp.CSS(`textarea[name=evidence]`), "customer called on 2027-03-01 and agreed to 7345 RUB"))
	require.EqualValues(t, http.StatusOK, b.submit(button("Confirm")))
	require.Empty(t, b.text(`p[role=alert]`))
	n.waitFor("the confirmed bill is paid", func() bool { return n.billStatus(enr, bill) == "paid" },
		func() any { return n.list("/v1/enrollments/" + enr + "/bills") })
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, n.ledgerOps(enr+":"+bill))
	var captured []int64
	for _, e := range n.list("/v1/dev/gateways/sim1/ledger") {
		if e["op"] == "capture" {
			captured = append(captured, int64(e["amount"].(float64)))
		}
	}
	require.Equal(t, []int64{734500}, captured)

	b.open("/console/enrollments/" + enr)
	require.Equal(t, "paid", b.text(".bill-status"))
	b.requireRow("customer called", "support", keyID)
	// A paid bill offers nothing, and a housing bill has no registry.
	buttons := run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('main button')).map(x => x.innerText.trim())`))
	require.Empty(t, buttons, "no Confirm or Withdraw on a paid bill")
	require.NotContains(t, b.body(), "Registry posting")
}

func (n *node) billStatus(enr, billID string) string {
	n.t.Helper()
	for _, b := range n.list("/v1/enrollments/" + enr + "/bills?limit=100") {
		if b["bill_id"] == billID {
			return b["status"].(string)
		}
	}
	return ""
}

// A POST without the session's CSRF token, or with another session's, is
// refused with 403 and changes nothing.
func TestPostWithoutCSRFIsRefused(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	_, support := n.createKey("support", "")
	sub := n.createSubscription("cust-csrf", "tok_ok")
	n.waitCharge(sub, "succeeded")

	b := newTab(t, n)
	b.login(support)
	b.open("/console/subscriptions/" + sub)
	fields := b.formFields("Pause")
	require.NotEmpty(t, fields["csrf"])
	require.NotEmpty(t, fields["form_id"])
	action := fields["@action"]
	require.Equal(t, "/console/subscriptions/"+sub+"/pause", action)

	other := newTab(t, n)
	other.login(support)
	other.open("/console/subscriptions/" + sub)
	foreign := other.formFields("Pause")["csrf"]
	require.NotEqual(t, fields["csrf"], foreign, "each session has its own token")

	attempts := []struct {
		name string
		csrf *string
	}{
		{"no token", nil},
		{"an empty token", ptr("")},
		{"a wrong token", ptr(strings.Repeat("A", len(fields["csrf"])))},
		{"another session's token", &foreign},
	}
	for i, a := range attempts {
		name := a.name
		form := map[string]string{"form_id": fmt.Sprintf("csrf-attack-%d-0123456789abcdef", i)}
		if a.csrf != nil {
			form["csrf"] = *a.csrf
		}
		b.open("/console/subscriptions/" + sub)
		require.EqualValues(t, http.StatusForbidden, b.postForm(action, form), name)
		require.Contains(t, b.body(), "Invalid form token", name)
	}
	require.Equal(t, "active", n.subscription(sub)["status"], "nothing changed")
	require.Empty(t, eventsOf(n.events(sub), "paused"))
	require.EqualValues(t, len(attempts), n.postsTo(action), "every attempt reached rebill")

	// The page's own form, token and all, still works.
	b.open("/console/subscriptions/" + sub)
	require.EqualValues(t, http.StatusOK, b.submit(button("Pause")))
	require.Equal(t, "paused", n.subscription(sub)["status"])
}

func ptr[T any](v T) *T { return &v }

// idleTimeout is the test node's REBILL_CONSOLE_IDLE_TIMEOUT: short, so
// the test sees a session end.
const idleTimeout = 3 * time.Second

// A session left idle past REBILL_CONSOLE_IDLE_TIMEOUT ends: the next page
// goes to the login page, which says so, and a form rendered before is
// refused without acting.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, map[string]string{"REBILL_CONSOLE_IDLE_TIMEOUT": idleTimeout.String()})
	keyID, support := n.createKey("support", "")
	sub := n.createSubscription("cust-idle", "tok_ok")
	n.waitCharge(sub, "succeeded")

	b := newTab(t, n)
	b.login(support)
	b.open("/console/subscriptions/" + sub)
	pause := b.formFields("Pause")
	lastSeen := n.sessionLastSeen(keyID)
	require.False(t, lastSeen.IsZero(), "the session is stored")

	// Wait, without touching the session, until it is idle past the
	// timeout by the database's clock.
	n.waitIdle(keyID, idleTimeout, waitTimeout)

	require.EqualValues(t, http.StatusOK, b.open("/console/subscriptions/"+sub))
	require.True(t, strings.HasPrefix(b.path(), "/console/login"), b.path())
	require.Contains(t, b.body(), "Your session has ended")
	require.True(t, n.sessionLastSeen(keyID).IsZero(), "the ended session is deleted")

	action := pause["@action"]
	delete(pause, "@action")
	b.postForm(action, pause)
	require.True(t, strings.HasPrefix(b.path(), "/console/login"), b.path())
	require.Equal(t, "active", n.subscription(sub)["status"], "an ended session acts no more")

	require.EqualValues(t, http.StatusOK, b.login(support))
	require.Equal(t, "/console/", b.path(), "logging in again works")
}

// sessionLastSeen is when the key's console session was last used (zero:
// it has none).
func (n *node) sessionLastSeen(keyID string) time.Time {
	n.t.Helper()
	var at *time.Time
	err := n.pool.QueryRow(context.Background(),
		`SELECT max(last_seen_at) FROM console_sessions WHERE key_id = $1`, keyID).Scan(&at)
	require.NoError(n.t, err)
	if at == nil {
		return time.Time{}
	}
	return *at
}

// waitIdle waits until the key's session has not been used for idle, by
// the database server's clock, failing after limit.
func (n *node) waitIdle(keyID string, idle, limit time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var seconds *float64
		err := n.pool.QueryRow(context.Background(),
			`SELECT extract(epoch FROM now() - max(last_seen_at))::float8 FROM console_sessions WHERE key_id = $1`, keyID).Scan(&seconds)
		require.NoError(n.t, err)
		require.NotNil(n.t, seconds, "the session of %s is gone before it ended", keyID)
		if time.Duration(*seconds*float64(time.Second)) > idle {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the session of %s was still in use after %s", keyID, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A production-mode node (wall clock, no /v1/dev, a configured gateway)
// serves the console too: log in, find a customer, open the subscription.
func TestProductionNode(t *testing.T) {
	t.Parallel()
	n := startProductionNode(t, nil)
	status, _ := n.call(adminKey, http.MethodGet, "/v1/dev/clock", nil)
	require.Equal(t, http.StatusNotFound, status, "not a dev node")
	_, support := n.createKey("support", "")
	sub := n.createSubscription("cust-prod", "tok_ok")
	n.waitCharge(sub, "succeeded")

	b := newTab(t, n)
	require.EqualValues(t, http.StatusOK, b.login(support))
	require.Equal(t, "/console/", b.path())
	b.do(chromedp.SendKeys(chromedp.ID("q"), "cust-prod"))
	require.EqualValues(t, http.StatusOK, b.submit(button("Search")))
	require.True(t, slices.Contains(b.hrefs(), "/console/subscriptions/"+sub), b.hrefs())
	require.EqualValues(t, http.StatusOK, b.submit(link("/console/subscriptions/"+sub)))
	require.Equal(t, "active", b.text("#status"))
	b.requireRow("succeeded", "sim1")
}
