package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// internalError is what a gateway's Go error chain shows: a URL, a host
// and port, the context's deadline.
var internalError = regexp.MustCompile(`(?i)https?:|://|\b(?:\d{1,3}\.){3}\d{1,3}\b|\[::1?\]|localhost|context deadline|dial tcp|look up|operations/`)

// A charge whose gateway never answers goes to review with review_code
// gateway_timeout and the code's sentence: the customer's own key, the
// event and the console's review queue and charge page show no URL, host,
// port or Go error.
func TestTimedOutChargeShowsNoInternalError(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	n.api(t, http.MethodPost, "/v1/dev/gateways/sim4/faults", map[string]any{"latency_ms": 1500})
	sub := n.api(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-timeout", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim4", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	var charge string
	require.Eventually(t, func() bool {
		return n.pool.QueryRow(ctx, `SELECT id::text FROM charges WHERE subscription_id = $1 AND status = 'requires_review'`,
			sub).Scan(&charge) == nil
	}, 90*time.Second, 100*time.Millisecond)

	customer, _ := n.newKey(t, "customer", "cust-timeout")
	req, err := http.NewRequest(http.MethodGet, n.url+"/v1/charges/"+charge, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+customer)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, string(charges.ReviewGatewayTimeout), got["review_code"])
	require.Regexp(t, "^"+regexp.QuoteMeta(charges.ReviewGatewayTimeout.Sentence()), got["review_reason"])
	require.NotRegexp(t, internalError, string(body))

	var events []string
	rows, err := n.pool.Query(ctx, `SELECT data::text FROM events WHERE object_id = $1 AND type = 'charge.requires_review'`, charge)
	require.NoError(t, err)
	for rows.Next() {
		var data string
		require.NoError(t, rows.Scan(&data))
		events = append(events, data)
	}
	require.NoError(t, rows.Err())
	require.Len(t, events, 1)
	require.Contains(t, events[0], `"review_code":"gateway_timeout"`)
	require.NotRegexp(t, internalError, events[0])

	u := newBrowser(t, n.url)
	u.login(adminKey)
	for _, path := range []string{"/console/review", "/console/charges/" + charge} {
		page := u.get(path)
		require.Equal(t, http.StatusOK, page.status, page.body)
		require.Contains(t, page.body, charges.ReviewGatewayTimeout.Sentence(), path)
		require.NotRegexp(t, internalError, page.body, path)
	}
	require.Contains(t, u.get("/console/review").body, "<code>gateway_timeout</code>: ")
}
