//go:build browser

package browsertest

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every console page opens in the browser with data on it: an active, a
// paused and a cancelled subscription, a charge in review, a housing
// enrollment with a bill waiting for confirmation, a gateway failing
// every call, an experiment, the admin's sessions and a page that is not
// there. With REBILL_SCREENSHOTS set, each is saved as a PNG.
func TestEveryPage(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "experiments.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
- key: dunning-short
  description: retries at 1, 2 and 4 days
  policy: dunning
  start: 2020-01-01T00:00:00Z
  min_per_arm: 500
  arms:
    - {name: control, weight: 1}
    - {name: short, weight: 1, dunning: [1d, 2d, 4d], hour: 10}
`), 0o600))
	n := startDevNode(t, map[string]string{"REBILL_EXPERIMENTS_FILE": file, "REBILL_UNAVAILABLE_FOR": "1ms"})
	_, support := n.createKey("support", "")
	n.admin(http.MethodPost, "/v1/dev/clock", map[string]any{"now": "2027-03-01T09:00:00Z"})
	active := n.createSubscription("cust-pages", "tok_ok")
	paused := n.createSubscription("cust-pages", "tok_ok")
	cancelled := n.createSubscription("cust-pages", "tok_ok")
	charge := n.waitCharge(active, "succeeded")["id"].(string)
	n.waitCharge(paused, "succeeded")
	n.waitCharge(cancelled, "succeeded")
	n.admin(http.MethodPost, "/v1/subscriptions/"+paused+"/pause", map[string]any{})
	n.admin(http.MethodPost, "/v1/subscriptions/"+cancelled+"/cancel", map[string]any{"at_period_end": false})
	enr := n.createHousingEnrollment("cust-pages", 100000)
	n.admin(http.MethodPost, "/v1/dev/bill-sources/housing/bills", map[string]any{
		"account_ref": "75ДА533315", "bill_id": "ZHKU-2027-02", "amount": 734500,
		"issued_at": "2027-03-01T08:00:00Z", "due_date": "2027-03-25",
	})
	n.waitFor("the bill waits for confirmation", func() bool { return n.billStatus(enr, "ZHKU-2027-02") == "awaiting_confirmation" },
		func() any { return n.list("/v1/enrollments/" + enr + "/bills") })
	n.faults(map[string]any{"down": true})
	review := n.createSubscription("cust-pages-review", "tok_ok")
	reviewCharge := n.waitCharge(review, "requires_review")["id"].(string)
	n.faults(map[string]any{"down": false})
	// sim4 fails every call: the operations page shows it failing.
	n.admin(http.MethodPost, "/v1/dev/gateways/sim4/faults", map[string]any{"down": true})
	failing := n.admin(http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-pages-sim4", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim4", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	n.waitFor("sim4's charge leaves the pipeline", func() bool {
		cs := n.charges(failing)
		return len(cs) == 1 && (cs[0]["status"] == "requires_review" || cs[0]["status"] == "failed")
	}, func() any { return n.charges(failing) })

	b := newTab(t, n)
	require.EqualValues(t, http.StatusOK, b.open("/console/login"))
	b.shot("login")
	b.login(support)
	pages := []struct {
		name, path string
		status     int64
	}{
		{"home", "/console/", http.StatusOK},
		{"search", "/console/search?q=cust-pages", http.StatusOK},
		{"subscription-active", "/console/subscriptions/" + active, http.StatusOK},
		{"subscription-paused", "/console/subscriptions/" + paused, http.StatusOK},
		{"subscription-cancelled", "/console/subscriptions/" + cancelled, http.StatusOK},
		{"subscription-cancel-now", "/console/subscriptions/" + active + "/cancel", http.StatusOK},
		{"charge", "/console/charges/" + charge, http.StatusOK},
		{"charge-review", "/console/charges/" + reviewCharge, http.StatusOK},
		{"review", "/console/review", http.StatusOK},
		{"enrollment", "/console/enrollments/" + enr, http.StatusOK},
		{"operations", "/console/operations", http.StatusOK},
		{"experiments", "/console/experiments", http.StatusOK},
		{"experiment", "/console/experiments/dunning-short", http.StatusOK},
		{"settings", "/console/settings", http.StatusOK},
		{"not-found", "/console/subscriptions/00000000-0000-0000-0000-000000000001", http.StatusNotFound},
	}
	for _, p := range pages {
		require.EqualValues(t, p.status, b.open(p.path), p.name)
		b.shot(p.name)
	}
	a := newTab(t, n)
	a.login(adminKey)
	require.EqualValues(t, http.StatusOK, a.open("/console/sessions"))
	a.shot("sessions")
}
