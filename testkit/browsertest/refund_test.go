//go:build browser

package browsertest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A support person refunds part of a paid charge from its page with a
// double click: both POSTs reach rebill and one refund is made, returned
// at the gateway once; the refund history shows it. Then the rest is
// refunded, the form is gone, and the page says why.
func TestRefundFromChargePage(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, nil)
	keyID, support := n.createKey("support", "")
	sub := n.createSubscription("cust-refund", "tok_ok")
	charge := n.waitCharge(sub, "succeeded")
	id, key := charge["id"].(string), charge["key"].(string)

	b := newTab(t, n)
	b.login(support)
	page := "/console/charges/" + id
	require.EqualValues(t, http.StatusOK, b.open(page))
	b.do(chromedp.SendKeys(chromedp.ID("refund-amount"), "4.00"),
		chromedp.SetValue(chromedp.ID("refund-reason"), "duplicate"),
		chromedp.SendKeys(chromedp.ID("refund-evidence"), "bank statement shows the charge twice"))
	b.doubleSubmit(n, button("Refund"), page+"/refund")
	waitFor(t, "the page shows what was done", func() bool {
		return strings.HasPrefix(b.path(), page) && b.text(`p[role=status]`) != ""
	}, func() any { return b.path() + ": " + b.body() })
	require.Empty(t, b.text(`p[role=alert]`), "the second submission shows the first one's result, not an error")

	n.waitFor("the refund succeeds", func() bool {
		rs := n.list("/v1/charges/" + id + "/refunds")
		return len(rs) == 1 && rs[0]["status"] == "succeeded"
	}, func() any { return n.list("/v1/charges/" + id + "/refunds") })
	refunds := 0
	for _, e := range n.list("/v1/dev/gateways/sim1/ledger") {
		if e["op"] == "refund" && strings.HasPrefix(e["idempotency_key"].(string), key+":") {
			refunds++
			require.EqualValues(t, 400, e["amount"])
		}
	}
	require.Equal(t, 1, refunds, "one refund at the gateway for a double click")

	b.open(page)
	b.requireRow("duplicate", "succeeded", ":r1:refund", "bank statement")
	b.requireRow("charge.refund", "support", keyID)
	require.Equal(t, 1, b.countRows("charge.refund"))
	b.shot("charge-refund")

	// The rest: the amount left empty.
	b.do(chromedp.SendKeys(chromedp.ID("refund-evidence"), "customer cancelled, refund the rest"))
	require.EqualValues(t, http.StatusOK, b.submit(button("Refund")))
	n.waitFor("the rest is refunded", func() bool {
		return n.admin(http.MethodGet, "/v1/charges/"+id, nil)["amount_refunded"] == float64(1500)
	}, func() any { return n.admin(http.MethodGet, "/v1/charges/"+id, nil) })
	b.open(page)
	require.Equal(t, "No refund: the charge has been refunded in full.", b.text("#no-refund"))
	buttons := run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('main button')).map(x => x.innerText.trim())`))
	require.NotContains(t, buttons, "Refund")
}
