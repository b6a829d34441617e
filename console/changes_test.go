package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// changeFormOf is the page's Change form, filled with fields.
func changeFormOf(t *testing.T, page string, fields map[string]string) (string, map[string][]string) {
	t.Helper()
	action, hidden := form(t, page, "Change")
	f := cloneForm(hidden)
	f.Set("effective", "now")
	for k, v := range fields {
		f.Set(k, v)
	}
	return action, f
}

// The subscription page shows the credit balance and the pending change
// (what changes, from when), offers Change to support and Remove pending
// change only while one waits; a form the handler can judge alone is
// refused on the page with the reason, and nothing is recorded.
func TestConsoleSubscriptionChangeForm(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-change")
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub

	body := u.get(page).body
	require.Contains(t, body, `<legend>Change</legend>`)
	require.Contains(t, body, `(empty: keep 15.00 USD)`)
	require.Contains(t, body, `<option value="">keep month</option>`)
	for _, p := range []string{"none", "charge_now", "credit_next"} {
		require.Contains(t, body, `<option value="`+p+`">`+p+`: `)
	}
	require.Contains(t, body, `<dd id="credit-balance">0.00 USD</dd>`)
	require.NotContains(t, body, `id="pending-update"`)
	require.NotContains(t, body, "Remove pending change")
	action, _ := changeFormOf(t, body, nil)
	require.Equal(t, page+"/update", action)

	for _, tc := range []struct {
		fields map[string]string
		want   string
	}{
		{map[string]string{"amount": "1.234"}, "amount must be a positive amount in USD with at most 2 decimals, or empty for the current amount"},
		{map[string]string{"amount": "0"}, "amount must be a positive amount"},
		{map[string]string{"interval": "fortnight"}, "interval must be day, week, month, quarter or year"},
		{map[string]string{"interval_count": "0"}, "intervals per period must be a whole number from 1 to 365"},
		{map[string]string{"interval_count": "two"}, "intervals per period must be a whole number"},
		{map[string]string{"amount": "9", "effective": "soon"}, "when must be now or at the period&#39;s end"},
		{map[string]string{"amount": "9", "proration": "half"}, "proration must be none, charge_now or credit_next"},
		{map[string]string{"amount": "9", "effective": "period_end", "proration": "none"}, "proration applies only to a change made now"},
		{map[string]string{}, "nothing to change"},
	} {
		action, f := changeFormOf(t, body, tc.fields)
		res := u.post(action, f)
		require.Equal(t, http.StatusBadRequest, res.status, "%v: %s", tc.fields, res.body)
		require.Contains(t, res.body, `<p role="alert" class="alert">`, tc.fields)
		require.Contains(t, res.body, tc.want, tc.fields)
		require.Contains(t, res.body, `<dd id="status">active</dd>`, "the page as it is now")
	}
	require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))

	// A change waiting for the period's end, as the engine stores it.
	effective := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	pending, err := json.Marshal(map[string]any{"id": uuid.NewString(), "amount": 900, "interval": "quarter",
		"description": "Basic", "effective_at": effective, "created_at": effective.AddDate(0, 0, -10)})
	require.NoError(t, err)
	_, err = n.pool.Exec(context.Background(), `UPDATE subscriptions SET pending_update = $2, credit_balance = 250 WHERE id = $1`, sub, pending)
	require.NoError(t, err)
	body = u.get(page).body
	require.Contains(t, body, `<dd id="credit-balance">2.50 USD</dd>`)
	i := strings.Index(body, `<dd id="pending-update">From `)
	require.Positive(t, i, body)
	shown := body[i : i+strings.Index(body[i:], "</dd>")]
	require.Contains(t, shown, "2027-01-01")
	require.Contains(t, shown, "amount 15.00 USD → 9.00 USD; every 1 month → every 1 quarter; new description")
	remove, _ := form(t, body, "Remove pending change")
	require.Equal(t, page+"/pending_update/remove", remove)
}

// A change the use case refuses (here: a stale form on a subscription
// cancelled meanwhile) is answered on the page with the reason and the
// API's status, and changes nothing.
func TestConsoleChangeRefusedByTheUseCase(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-change-refused")
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub
	action, f := changeFormOf(t, u.get(page).body, map[string]string{"amount": "9.00", "effective": "period_end"})
	n.api(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{})

	res := u.post(action, f)
	require.Equal(t, http.StatusConflict, res.status, res.body)
	require.Contains(t, res.body, `<p role="alert" class="alert">`)
	require.Contains(t, res.body, "Not done")
	require.Contains(t, res.body, `<dd id="status">cancelled</dd>`)
	require.NotContains(t, res.body, `<legend>Change</legend>`, "a cancelled subscription offers no change")
	require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
	require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM subscriptions WHERE pending_update IS NOT NULL`))
}

// Support changes the plan at the period's end and removes the change
// from the page, through the use cases the API calls; each form acts once.
// It needs the subscription-changes engine.
func TestConsoleChangeAtPeriodEndAndRemoveIt(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-change-done")
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub

	action, f := changeFormOf(t, u.get(page).body, map[string]string{"amount": "9.00", "effective": "period_end"})
	res := u.post(action, f)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	again := u.post(action, f)
	require.Equal(t, http.StatusSeeOther, again.status, "a resubmitted form acts once: %s", again.body)
	done := u.get(res.header.Get("Location")).body
	require.Contains(t, done, "Change scheduled for ")
	require.Contains(t, done, "amount 15.00 USD → 9.00 USD")
	require.Contains(t, done, `<dd id="pending-update">From `)
	require.Equal(t, 1, count(t, n.pool, `SELECT count(*) FROM console_actions WHERE action = 'subscription.update_at_period_end'`))
	got := n.api(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)
	require.EqualValues(t, 1500, got["amount"], "the period keeps its price")
	require.EqualValues(t, 900, got["pending_update"].(map[string]any)["amount"])

	remove, rf := form(t, done, "Remove pending change")
	res = u.post(remove, rf)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	done = u.get(res.header.Get("Location")).body
	require.Contains(t, done, "Pending change removed: the next period keeps 15.00 USD every 1 month.")
	require.NotContains(t, done, `id="pending-update"`)
	require.Nil(t, n.api(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["pending_update"])
}
