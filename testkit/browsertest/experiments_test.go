//go:build browser

package browsertest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A support agent reads an experiment in the console: the list names it
// with its policy and status, and its page shows each arm's subscriptions
// and rates, the treatment's comparison, and the verdict in words.
func TestExperimentPages(t *testing.T) {
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
	n := startDevNode(t, map[string]string{"REBILL_EXPERIMENTS_FILE": file})
	subs := make([]string, 12)
	for i := range subs {
		token := "tok_ok"
		if i%2 == 1 {
			token = "tok_decline_funds"
		}
		subs[i] = n.createSubscription(fmt.Sprintf("cus-exp-%d", i), token)
	}
	for i, sub := range subs {
		n.waitCharge(sub, map[bool]string{true: "succeeded", false: "declined"}[i%2 == 0])
	}
	_, support := n.createKey("support", "")

	b := newTab(t, n)
	require.EqualValues(t, http.StatusOK, b.login(support))
	require.EqualValues(t, http.StatusOK, b.open("/console/experiments"))
	body := b.body()
	for _, want := range []string{"dunning-short", "dunning", "running"} {
		require.Contains(t, body, want)
	}
	require.EqualValues(t, http.StatusOK, b.open("/console/experiments/dunning-short"))
	body = b.body()
	for _, want := range []string{"retries at 1, 2 and 4 days", "control", "short", "too early: fewer than 500 per arm"} {
		require.Contains(t, body, want)
	}
	b.shot("experiment")
	require.EqualValues(t, http.StatusNotFound, b.open("/console/experiments/nope"))
}
