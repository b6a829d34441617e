package ops_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/ops"
)

// promtool finds promtool (Debian package prometheus; .ci/run installs
// it). Outside CI a machine without it skips the rule tests; in CI
// (CI=true) its absence fails them, so the rules are never left unchecked.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("promtool not found on PATH (CI=true): install it with apt-get install -y --no-install-recommends prometheus")
	}
	t.Skip("promtool not found on PATH: apt-get install -y --no-install-recommends prometheus to check the alert rules")
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	t.Logf("promtool %v:\n%s", args, out)
}

func TestAlertRulesAreValid(t *testing.T) {
	t.Parallel()
	runPromtool(t, "check", "rules", "alerts.yml")
}

// TestAlertRulesFireOnlyWhenTheyShould runs alerts_test.yml: for every rule,
// series that must fire it and series that must not.
func TestAlertRulesFireOnlyWhenTheyShould(t *testing.T) {
	t.Parallel()
	runPromtool(t, "test", "rules", "alerts_test.yml")
}

// TestDashboardIsAGrafanaModel checks the dashboard's shape: every panel
// but the rows queries Prometheus through the datasource variable, and ids
// are unique (Grafana silently drops duplicates).
func TestDashboardIsAGrafanaModel(t *testing.T) {
	t.Parallel()
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(ops.Dashboard, &d))
	require.NotEmpty(t, d.UID)
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, q := range p.Targets {
			require.NotEmpty(t, q.Expr, "panel %q", p.Title)
			queries++
		}
	}
	require.GreaterOrEqual(t, queries, 20)
}
