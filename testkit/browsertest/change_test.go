//go:build browser

package browsertest

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A support person schedules a cheaper plan for the period's end from the
// subscription page with a double click: one change is made, the page
// shows it as the pending change, and Remove pending change takes it away.
// A change the page refuses (nothing to change) is answered on the page.
func TestChangePlanFromSubscriptionPage(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	keyID, support := n.createKey("support", "")
	sub := n.createSubscription("cust-change", "tok_ok")
	n.waitCharge(sub, "succeeded")

	b := newTab(t, n)
	b.login(support)
	page := "/console/subscriptions/" + sub
	require.EqualValues(t, http.StatusOK, b.open(page))
	require.EqualValues(t, http.StatusBadRequest, b.submit(button("Change")))
	require.Contains(t, b.text(`p[role=alert]`), "nothing to change")

	b.open(page)
	b.do(chromedp.SendKeys(chromedp.ID("change-amount"), "9.00"),
		chromedp.SetValue(chromedp.ID("change-effective"), "period_end"))
	b.doubleSubmit(n, button("Change"), page+"/update")
	// The page is read again once rebill made the change: a script run in
	// the tab while it is still loading the second answer can wait for
	// ever in Chromium.
	waitFor(t, "the change is made", func() bool { return n.subscription(sub)["pending_update"] != nil },
		func() any { return n.subscription(sub) })
	require.EqualValues(t, http.StatusOK, b.open(page))
	require.Contains(t, b.text("#pending-update"), "amount 15.00 USD → 9.00 USD")
	require.EqualValues(t, 900, n.subscription(sub)["pending_update"].(map[string]any)["amount"])
	require.Len(t, eventsOf(n.events(sub), "update_scheduled"), 1, "one change for a double click")
	b.requireRow("subscription.update_at_period_end", "support", keyID)
	b.shot("subscription-pending-change")

	require.EqualValues(t, http.StatusOK, b.submit(button("Remove pending change")))
	require.Empty(t, b.text("#pending-update"))
	require.Nil(t, n.subscription(sub)["pending_update"])
}
