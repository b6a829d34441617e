package console_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A trial's page offers ending it and the cancels, never a pause; ending
// it, with the form sent several times at once, ends it once and charges
// its first period once.
func TestConsoleEndsATrialOnce(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	support, _ := n.newKey(t, "support", "")
	sub := n.api(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-trial", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"trial_period_days": 14,
		"payment_method":    map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	u := newBrowser(t, n.url)
	u.login(support)
	page := "/console/subscriptions/" + sub

	shown := u.get(page).body
	require.Contains(t, shown, `<dd id="status">trialing</dd>`)
	require.Contains(t, shown, `<dd id="trial-end">`)
	require.NotContains(t, shown, ">Pause</button>")
	action, fields := form(t, shown, "End trial now")
	require.Equal(t, page+"/end-trial", action)
	var wg sync.WaitGroup
	statuses := make([]int, 3)
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
	require.Equal(t, "active", status(t, n, sub))
	require.Equal(t, 1, subscriptionEvents(t, n, sub, "trial_ended"))
	require.Equal(t, 1, count(t, n.pool, `SELECT count(*) FROM charges WHERE subscription_id = $1`, sub))
	after := u.get(page).body
	require.NotContains(t, after, "End trial now</button>")
	require.Contains(t, after, ">Pause</button>")

	// A trial set to cancel at its end is not offered to end early.
	other := n.api(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-trial", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"trial_period_days": 14,
		"payment_method":    map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	n.api(t, http.MethodPost, "/v1/subscriptions/"+other+"/cancel", map[string]any{"at_period_end": true})
	cancelling := u.get("/console/subscriptions/" + other).body
	require.NotContains(t, cancelling, "End trial now</button>")
	require.Contains(t, cancelling, "at the trial's end: nothing is charged")
}
