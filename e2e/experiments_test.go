package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/experiments"
)

// experimentsFile writes an experiments file and returns its path.
func experimentsFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "experiments.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// createOn creates a subscription through node i, for a customer of its
// own (velocity limits count per customer).
func (b testBundle) createOn(t *testing.T, i int, customer, token string) string {
	t.Helper()
	body := subscriptionBody(token, "month")
	body["customer_id"] = customer
	data, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, b.nodes[i].server.URL+"/v1/subscriptions", bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%s", t.Name(), customer))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Equal(t, http.StatusCreated, res.StatusCode, "%v", out)
	return out["id"].(string)
}

// settled waits until no charge has anything to do at the service clock:
// each is final, or declined with its next attempt ahead.
func (b testBundle) settled(t *testing.T, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var busy int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM charges
			WHERE status::text NOT IN ($1, $2, $3, $4) OR (status::text = $3 AND next_attempt_at <= (SELECT now FROM dev_clock))`,
			"succeeded", "failed", "declined", "voided").Scan(&busy)
		return err == nil && busy == 0
	}, 60*time.Second, 100*time.Millisecond, what)
}

const dunningExperiment = `
- key: dunning-short
  description: retries at 1, 2 and 4 days instead of 1, 3, 5 and 7
  policy: dunning
  start: 2020-01-01T00:00:00Z
  min_per_arm: 30
  eligible: {currencies: [USD]}
  arms:
    - {name: control, weight: 50}
    - {name: short, weight: 50, dunning: [1d, 2d, 4d]}
`

// A dunning experiment over 300 dev subscriptions created through two
// nodes, a third of them on cards that recover after 3 days, a third after
// 6 days, a third approved at once. Every subscription's arm is the hash's
// on both nodes, its charges carry it, and each arm follows its schedule:
// control (1, 3, 5, 7 days) recovers every card; short (1, 2, 4 days)
// recovers the 3-day cards at day 4 and gives up on the 6-day ones. The
// report's figures are those the gateway ledger implies, and its verdict
// says the treatment is worse.
func TestDunningExperimentReportMatchesTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, map[string]string{"REBILL_EXPERIMENTS_FILE": experimentsFile(t, dunningExperiment)})
	const n = 300
	subs := make([]string, n)
	kinds := make([]string, n)
	for i := range n {
		kinds[i] = []string{"tok_funds_after_3d", "tok_funds_after_6d", "tok_ok"}[i%3]
		subs[i] = b.createOn(t, i%2, fmt.Sprintf("cus-exp-%d", i), fmt.Sprintf("%s_s%d", kinds[i], i))
	}
	b.settled(t, "first attempts")
	set, err := experiments.Parse([]byte(dunningExperiment), experiments.Limits{DunningMax: 720 * time.Hour, MaxAttempts: 15})
	require.NoError(t, err)
	e, _ := set.Get("dunning-short")
	arms := map[string]string{}
	for _, id := range subs {
		sub := b.call(t, http.MethodGet, "/v1/subscriptions/"+id, nil)
		arm := sub["experiments"].(map[string]any)["dunning-short"]
		require.Equal(t, experiments.Bucket(e, id), arm, "subscription %s", id)
		arms[id] = arm.(string)
	}
	for _, step := range []string{"24h", "24h", "24h", "24h", "24h", "48h"} {
		b.advance(t, step)
		b.settled(t, "after "+step)
	}

	// What the ledger implies, charge by charge.
	type figures struct{ subs, charges, firstOK, firstTrials, recovered, recoveryTrials, collected int64 }
	want := map[string]*figures{"control": {}, "short": {}}
	ledger := b.ledger(t, "sim1")
	for i, id := range subs {
		f := want[arms[id]]
		f.subs++
		cs := b.charges(t, id)
		require.Len(t, cs, 1)
		c := cs[0]
		require.Equal(t, map[string]any{"dunning-short": arms[id]}, c["experiments"])
		f.charges++
		ops := opsFor(ledger, c["key"].(string))
		declined, paid := ops["authorize:declined"], ops["capture:succeeded"]
		require.LessOrEqual(t, paid, 1, "charge %s captured twice", c["id"])
		f.firstTrials++
		if declined == 0 && paid == 1 {
			f.firstOK++
		}
		if declined > 0 {
			f.recoveryTrials++
			f.recovered += int64(paid)
		}
		f.collected += int64(paid) * 1500
		switch {
		case kinds[i] == "tok_funds_after_6d" && arms[id] == "short":
			require.Equal(t, "failed", c["status"], "a 6-day card outlives the short schedule")
		default:
			require.Equal(t, "succeeded", c["status"], "%s on %s", kinds[i], arms[id])
		}
	}

	rep := b.call(t, http.MethodGet, "/v1/experiments/dunning-short", nil)
	require.Equal(t, "running", rep["status"])
	require.Equal(t, "dunning_recovery", rep["primary_metric"])
	got := map[string]map[string]any{}
	for _, a := range rep["arms"].([]any) {
		arm := a.(map[string]any)
		got[arm["name"].(string)] = arm
	}
	for name, f := range want {
		a := got[name]
		require.NotNil(t, a, "arm %s", name)
		require.EqualValues(t, f.subs, a["subscriptions"], name)
		require.EqualValues(t, f.charges, a["charges"], name)
		first := a["first_attempt_approval"].(map[string]any)
		require.EqualValues(t, f.firstOK, first["successes"], name)
		require.EqualValues(t, f.firstTrials, first["trials"], name)
		rec := a["dunning_recovery"].(map[string]any)
		require.EqualValues(t, f.recovered, rec["successes"], name)
		require.EqualValues(t, f.recoveryTrials, rec["trials"], name)
		require.Equal(t, []any{map[string]any{"currency": "USD", "amount": float64(f.collected)}}, a["collected"], name)
		t.Logf("%s: %d subscriptions, first attempt %d/%d, recovery %d/%d, collected %d", name, f.subs,
			f.firstOK, f.firstTrials, f.recovered, f.recoveryTrials, f.collected)
	}
	require.EqualValues(t, want["control"].recovered, want["control"].recoveryTrials, "control recovers every card")
	versus := got["short"]["versus_control"].(map[string]any)
	require.Equal(t, "treatment_worse", versus["verdict"], "%v", versus)
	require.Less(t, versus["p_value"].(float64), 0.001)
	require.Nil(t, got["control"]["versus_control"])

	list := b.call(t, http.MethodGet, "/v1/experiments", nil)["data"].([]any)
	require.Len(t, list, 1)
}

// Past its stop an experiment governs no decision: a charge whose arm
// would have ended its dunning after the second retry goes on with the
// default schedule instead, its record kept; the retry it was already
// waiting for keeps its time.
func TestStoppedExperimentReturnsToTheDefaultSchedule(t *testing.T) {
	t.Parallel()
	stop := time.Now().Add(36 * time.Hour).UTC().Format(time.RFC3339)
	file := experimentsFile(t, `
- key: give-up-early
  policy: dunning
  start: 2020-01-01T00:00:00Z
  stop: `+stop+`
  arms:
    - {name: control, weight: 0}
    - {name: short, weight: 1, dunning: [1d, 2d]}
`)
	b := setup(t, 1, map[string]string{"REBILL_EXPERIMENTS_FILE": file})
	running := b.createOn(t, 0, "cus-running", "tok_decline_funds_a")
	b.settled(t, "first attempts")
	b.advance(t, "24h")
	b.settled(t, "the +1 day retry, decided while the experiment runs")
	c := b.charges(t, running)[0]
	first, err := time.Parse(time.RFC3339Nano, c["created_at"].(string))
	require.NoError(t, err)
	next, err := time.Parse(time.RFC3339Nano, c["next_attempt_at"].(string))
	require.NoError(t, err)
	require.Equal(t, first.Add(48*time.Hour), next, "the short arm's second retry")

	b.advance(t, "24h") // past the stop: the retry at +2 days is decided by the default schedule
	b.settled(t, "the +2 day retry, decided after the stop")
	c = b.charges(t, running)[0]
	require.Equal(t, "declined", c["status"], "the short arm would have failed it")
	require.EqualValues(t, 3, c["attempt_count"])
	next, err = time.Parse(time.RFC3339Nano, c["next_attempt_at"].(string))
	require.NoError(t, err)
	require.Equal(t, first.Add(120*time.Hour), next, "the default schedule's third retry")
	require.Equal(t, map[string]any{"give-up-early": "short"}, c["experiments"], "the record stays")
	rep := b.call(t, http.MethodGet, "/v1/experiments/give-up-early", nil)
	require.Equal(t, "stopped", rep["status"])
}
