//go:build browser

package browsertest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A support agent's afternoon: a pause with a day to resume on, a refused
// action answered on the page it came from, Cancel now's second step, the
// review queue in words, Mark failed with its evidence on the charge's
// timeline, and a failing gateway shown failing.
func TestSupportAgentAfternoon(t *testing.T) {
	t.Parallel()
	n := startDevNode(t, map[string]string{"REBILL_UNAVAILABLE_FOR": "1ms"})
	keyID, support := n.createKey("support", "")
	n.admin(http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2027-03-01T09:00:00Z"})
	paused := n.createSubscription("cust-day", "tok_ok")
	cancelled := n.createSubscription("cust-day", "tok_ok")
	n.waitCharge(paused, "succeeded")
	n.waitCharge(cancelled, "succeeded")
	b := newTab(t, n)
	b.login(support)

	// Pause until a day: the date field, then the Pause button of its box.
	page := "/console/subscriptions/" + paused
	b.open(page)
	require.Equal(t, "Pause", b.text("fieldset.action legend"))
	b.do(chromedp.SetValue(chromedp.ID("resume_at"), "2027-04-15"))
	require.EqualValues(t, http.StatusOK, b.submit(button("Pause")))
	require.Equal(t, "paused", b.text("#status"))
	require.Equal(t, "none while paused", b.text("#next-charge"), "a paused subscription has no next charge")
	require.Contains(t, b.body(), "2027-04-15 00:00:00 UTC")
	pause := n.subscription(paused)["pause"].(map[string]any)
	require.Equal(t, "2027-04-15T00:00:00Z", pause["resume_at"])
	require.Nil(t, n.subscription(paused)["next_charge_at"])
	b.requireRow("subscription.pause_until", "support", keyID, "Paused until 2027-04-15 00:00 UTC")
	body := b.body()
	require.NotContains(t, body, "\nPause\n", "no Pause on a paused subscription")
	require.Contains(t, body, "Resume")

	// A refused action: the subscription was cancelled meanwhile (by the
	// API); Resume is answered on the subscription's page with why.
	n.admin(http.MethodPost, "/v1/subscriptions/"+paused+"/cancel", map[string]any{"at_period_end": false})
	require.EqualValues(t, http.StatusConflict, b.submit(button("Resume")))
	require.Equal(t, "cancelled", b.text("#status"), "the page it came from, as it is now")
	require.Contains(t, b.text(`p[role=alert]`), "Not done: subscription cannot move from cancelled")
	require.Contains(t, b.hrefs(), "/console/charges/"+n.charges(paused)[0]["id"].(string), "the whole page, not a bare error page")

	// Cancel now: a second step that names what it ends, in red.
	b.open("/console/subscriptions/" + cancelled)
	require.EqualValues(t, http.StatusOK, b.submit(link("/console/subscriptions/"+cancelled+"/cancel")))
	require.Contains(t, b.body(), "It cannot be undone.")
	red := run(b, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('button.danger')).backgroundColor`))
	require.Equal(t, "rgb(183, 28, 28)", red)
	require.Equal(t, "active", n.subscription(cancelled)["status"], "opening the second step changes nothing")
	require.EqualValues(t, http.StatusOK, b.submit(button("Yes, cancel now")))
	require.Equal(t, "cancelled", b.text("#status"))
	b.requireRow("subscription.cancel", "support", keyID)

	// The review queue explains itself; Mark failed takes its evidence
	// from the box in its own fieldset.
	n.faults(map[string]any{"down": true})
	review := n.createSubscription("cust-review-words", "tok_ok")
	charge := n.waitCharge(review, "requires_review")["id"].(string)
	n.faults(map[string]any{"down": false})
	b.open("/console/review")
	row := b.requireRow(charge, "gateway_unavailable", "the gateway was down for longer than rebill waits for it")
	require.NotContains(t, row, "http")
	// rebill asks the gateway what the attempt did; once it has, the queue
	// says what it found in words.
	lookup := fmt.Sprintf("#charge-%s td.lookup", charge)
	waitFor(t, "the look-up's finding", func() bool {
		b.open("/console/review")
		return strings.HasPrefix(b.text(lookup), "No capture: the gateway holds none of this attempt's money")
	}, func() any { return b.text(lookup) })
	require.Contains(t, b.text(lookup), "A retry is safe.")
	attached := run(b, chromedp.Evaluate[[]string](fmt.Sprintf(`Array.from(document.querySelectorAll('#charge-%s fieldset.action')).map(f =>
		f.querySelector('legend').innerText + '|' + f.querySelector('button').innerText + '|' + (f.querySelector('textarea') ? 'evidence' : ''))`, charge)))
	require.Equal(t, []string{"Mark succeeded|Mark succeeded|evidence", "Mark failed|Mark failed|evidence"}, attached)
	b.do(chromedp.SendKeys(chromedp.ID("evidence-failed-"+charge), "gateway dashboard: no payment, ticket 77"))
	require.EqualValues(t, http.StatusOK, b.submit(chromedp.Search(fmt.Sprintf(`//tr[@id=%q]//button[normalize-space()='Mark failed']`, "charge-"+charge))))
	require.Empty(t, b.text(`p[role=alert]`))
	b.open("/console/charges/" + charge)
	require.Equal(t, "failed (resolved by a person)", b.text("#status"))
	b.requireRow("charge.resolve_failed", "support", keyID, "gateway dashboard: no payment, ticket 77")
	require.NotContains(t, b.body(), "Retry", "a charge a person settled is not retried")

	// sim4 answers every call with 503: operations shows it failing, and
	// latencies in milliseconds.
	n.admin(http.MethodPost, "/v1/dev/gateways/sim4/faults", map[string]any{"down": true})
	n.admin(http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-sim4", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim4", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})
	waitFor(t, "operations shows sim4 failing", func() bool {
		b.open("/console/operations")
		return strings.HasPrefix(b.text("#gateway-sim4 td.gateway-state"), "failing")
	}, func() any { return b.rows() })
	require.Contains(t, b.text("#gateway-sim4 td.gateway-state"), "every one of its")
	sim1 := b.requireRow("sim1", "ok")
	require.Regexp(t, `\d+\.\d ms\t\d+\.\d ms$`, sim1)
	require.NotRegexp(t, `µs|\dms|\ds\b`, sim1)
}
