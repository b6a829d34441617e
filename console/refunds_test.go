package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// paidCharge waits for the subscription's first charge to succeed and
// returns its id.
func paidCharge(t *testing.T, n node, sub string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		for _, c := range n.api(t, http.MethodGet, "/v1/subscriptions/"+sub+"/charges", nil)["data"].([]any) {
			c := c.(map[string]any)
			if c["status"] == "succeeded" {
				id = c["id"].(string)
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	return id
}

// refundStatuses waits until the charge has want refunds, none of them
// pending or unknown, and returns their statuses.
func refundStatuses(t *testing.T, n node, charge string, want int) []string {
	t.Helper()
	var out []string
	require.Eventually(t, func() bool {
		out = out[:0]
		for _, r := range n.api(t, http.MethodGet, "/v1/charges/"+charge+"/refunds", nil)["data"].([]any) {
			st := r.(map[string]any)["status"].(string)
			if st == "pending" || st == "unknown" {
				return false
			}
			out = append(out, st)
		}
		return len(out) == want
	}, 20*time.Second, 50*time.Millisecond)
	return out
}

// A support person refunds a succeeded charge in part, then the rest, from
// its page: the form goes through the refunds use case, the history shows
// each refund, a bad amount or a missing evidence is refused on the page,
// and once nothing is left the form is gone and a stale form is refused
// with the reason.
func TestConsoleRefund(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, supportID := n.newKey(t, "support", "")
	sub := n.createSubscription(t, "cust-refund")
	charge := paidCharge(t, n, sub)
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/charges/" + charge

	body := u.get(page).body
	require.Contains(t, body, `<legend>Refund</legend>`)
	require.Contains(t, body, `empty: all that is left, 15.00 USD`)
	for _, reason := range []string{"duplicate", "fraudulent", "requested_by_customer"} {
		require.Contains(t, body, `<option value="`+reason+`">`)
	}
	require.NotContains(t, body, `<h2 id="refunds">`)
	action, fields := form(t, body, "Refund")
	require.Equal(t, page+"/refund", action)

	t.Run("bad input is refused on the page", func(t *testing.T) {
		for _, tc := range []struct{ amount, reason, evidence, want string }{
			{"1.234", "duplicate", "ticket 7", "amount must be a positive amount in USD with at most 2 decimals"},
			{"-5", "duplicate", "ticket 7", "amount must be"},
			{"5", "changed_mind", "ticket 7", "reason must be duplicate, fraudulent or requested_by_customer"},
			{"5", "duplicate", "  ", "evidence is required"},
			{"99.00", "duplicate", "ticket 7", "Not done"},
		} {
			f := cloneForm(fields)
			f.Set("amount", tc.amount)
			f.Set("reason", tc.reason)
			f.Set("evidence", tc.evidence)
			res := u.post(action, f)
			require.GreaterOrEqual(t, res.status, 400, tc.amount)
			require.Contains(t, res.body, `<p role="alert" class="alert">`, tc.amount)
			require.Contains(t, res.body, tc.want, tc.amount)
			require.Contains(t, res.body, `<dd id="status">succeeded</dd>`)
		}
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM refunds`))
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM console_actions`))
	})

	t.Run("a partial refund, then the rest", func(t *testing.T) {
		f := cloneForm(fields)
		f.Set("amount", "5.00")
		f.Set("reason", "requested_by_customer")
		f.Set("evidence", "call 2026-12-01, ticket 41")
		res := u.post(action, f)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		again := u.post(action, f)
		require.Equal(t, http.StatusSeeOther, again.status, "a resubmitted form acts once: %s", again.body)
		done := u.get(res.header.Get("Location")).body
		require.Contains(t, done, "Refund 1 of 5.00 USD asked (requested_by_customer)")
		require.Equal(t, []string{"succeeded"}, refundStatuses(t, n, charge, 1))

		body := u.get(page).body
		require.Contains(t, body, `<h2 id="refunds">Refunds</h2>`)
		require.Contains(t, body, `Refunded 5.00 USD of 15.00 USD.`)
		require.Contains(t, body, `:r1:refund</bdi></code>`)
		require.Contains(t, body, "call 2026-12-01, ticket 41")
		require.Contains(t, body, `empty: all that is left, 10.00 USD`)
		action, fields = form(t, body, "Refund")
		f = cloneForm(fields)
		f.Set("reason", "duplicate")
		f.Set("evidence", "bank statement shows it twice")
		res = u.post(action, f)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Equal(t, []string{"succeeded", "succeeded"}, refundStatuses(t, n, charge, 2))

		var role, keyID string
		require.NoError(t, n.pool.QueryRow(context.Background(), `SELECT role, key_id FROM console_actions
			WHERE action = 'charge.refund' AND evidence = 'bank statement shows it twice'`).Scan(&role, &keyID))
		require.Equal(t, []string{"support", supportID}, []string{role, keyID})
		require.Equal(t, 2, count(t, n.pool, `SELECT count(*) FROM console_actions WHERE action = 'charge.refund'`))
	})

	t.Run("nothing left: no form, and a stale one is refused with the reason", func(t *testing.T) {
		body := u.get(page).body
		require.Contains(t, body, `Refunded 15.00 USD of 15.00 USD.`)
		require.Contains(t, body, `No refund: the charge has been refunded in full.`)
		require.NotContains(t, body, `<legend>Refund</legend>`)
		f := cloneForm(fields)
		f.Set("form_id", strings.Repeat("x", 43))
		f.Set("reason", "duplicate")
		f.Set("evidence", "again")
		res := u.post(action, f)
		require.Equal(t, http.StatusConflict, res.status, res.body)
		require.Contains(t, res.body, `<p role="alert" class="alert">`)
		require.Equal(t, 2, count(t, n.pool, `SELECT count(*) FROM refunds`))
	})

	t.Run("a fine is refused with the reason", func(t *testing.T) {
		other := paidCharge(t, n, n.createSubscription(t, "cust-fine"))
		// The charge paid a fine (its registry UIN set, as the registry
		// posting sets it): the page offers no refund, and a form sent
		// anyway is refused.
		_, err := n.pool.Exec(context.Background(), `UPDATE charges SET registry_uin = '18810000000000000042' WHERE id = $1`, other)
		require.NoError(t, err)
		fine := "/console/charges/" + other
		body := u.get(fine).body
		require.Contains(t, body, `money paid to the state is returned through the state&#39;s own procedure`)
		require.NotContains(t, body, `<legend>Refund</legend>`)
		f := cloneForm(fields)
		f.Set("form_id", strings.Repeat("y", 43))
		f.Set("reason", "requested_by_customer")
		f.Set("evidence", "customer asked")
		res := u.post(fine+"/refund", f)
		require.Equal(t, http.StatusConflict, res.status, res.body)
		require.Regexp(t, `<p role="alert" class="alert">[^<]*state`, res.body, "the refusal names why")
		require.Equal(t, 0, count(t, n.pool, `SELECT count(*) FROM refunds WHERE charge_id = $1`, other))
	})
}

func cloneForm(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
