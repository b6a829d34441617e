package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/ops"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
)

// promtoolPath finds promtool (Debian package prometheus; .ci/run installs
// it): absent, the test skips, except in CI (CI=true), where it fails.
func promtoolPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("promtool not found on PATH (CI=true): install it with apt-get install -y --no-install-recommends prometheus")
	}
	t.Skip("promtool not found on PATH: apt-get install -y --no-install-recommends prometheus to lint /metrics")
	return ""
}

// promtoolCheckMetrics pipes an exposition to `promtool check metrics` and
// returns its report and its exit error.
func promtoolCheckMetrics(t *testing.T, exposition []byte) (string, error) {
	t.Helper()
	cmd := exec.Command(promtoolPath(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func scrape(t *testing.T, url string) []byte {
	t.Helper()
	res, err := procHTTP.Get(url + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return data
}

// sampleNames parses an exposition and returns the name of every sample
// in it (a histogram's _bucket, _sum and _count included).
func sampleNames(t *testing.T, exposition []byte) map[string]bool {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	require.NoError(t, err)
	names := map[string]bool{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"] = true
			fallthrough
		case dto.MetricType_SUMMARY:
			names[name+"_sum"] = true
			names[name+"_count"] = true
		}
	}
	return names
}

// dashboardMetrics parses the Grafana dashboard and returns the metric
// names its panels' queries read.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(ops.Dashboard, &d))
	name := regexp.MustCompile(`\brebill_[a-z0-9_]+`)
	var names []string
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			for _, n := range name.FindAllString(q.Expr, -1) {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	return names
}

// familiesWithoutSamples lists the families registry registers that have
// no sample among exported.
func familiesWithoutSamples(registry *prometheus.Registry, exported map[string]bool) []string {
	descs := make(chan *prometheus.Desc)
	go func() {
		registry.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var empty []string
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil && !exported[m[1]] {
			empty = append(empty, m[1])
		}
	}
	return empty
}

// TestFreshNodeExportsEveryDashboardMetric: a node that has just started
// and done nothing (no charge, no webhook) already exports a sample of
// every metric the dashboard queries, so no panel of a new deployment
// shows "No data" for want of a first event. The node is its own process:
// its /metrics holds only what it exported itself. The queue sample and
// the first scan run just after readiness, hence the deadline.
func TestFreshNodeExportsEveryDashboardMetric(t *testing.T) {
	t.Parallel()
	node := procStart(t, "fresh", map[string]string{
		"DATABASE_URL":          dbtest.URL(t),
		"REBILL_DEV":            "1",
		"REBILL_ADMIN_KEY":      adminKey,
		"REBILL_LOG_LEVEL":      "warn",
		"REBILL_DB_MAX_CONNS":   "10",
		"REBILL_ENCRYPTION_KEY": testEncryptionKey,
	})
	node.waitReady(t, 60*time.Second)
	wanted := dashboardMetrics(t)
	require.GreaterOrEqual(t, len(wanted), 15, "the dashboard's queries were parsed")
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		exported := sampleNames(t, scrape(t, node.URL))
		missing = missing[:0]
		for _, n := range wanted {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Empty(t, missing, "the dashboard queries metrics a fresh node does not export")
}

// TestLiveMetricsPassPromtool lints a live /metrics with `promtool check
// metrics`, the tool operators use: 0 problems. The node first bills a
// charge in an experiment arm and delivers its webhooks, and the test
// requires that every family the process registers has samples in the
// scrape, so that nothing escapes the check; the API listener's scrape
// must hold no internal-only family. A family promtool refuses (a gauge with a quantile
// label) shows the check can fail.
func TestLiveMetricsPassPromtool(t *testing.T) {
	t.Parallel()
	promtoolPath(t)
	// Every subscription in an experiment arm, so that the experiments'
	// family has a sample to lint.
	b := setup(t, 1, map[string]string{"REBILL_EXPERIMENTS_FILE": experimentsFile(t, `
- key: lint-metrics
  description: every subscription in an arm
  policy: dunning
  start: 2020-01-01T00:00:00Z
  min_per_arm: 30
  arms:
    - {name: control, weight: 50}
    - {name: short, weight: 50, dunning: [1d, 2d, 4d]}
`)})
	delivered := make(chan struct{}, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		delivered <- struct{}{}
	}))
	t.Cleanup(receiver.Close)
	b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": receiver.URL, "events": []string{"*"}})
	sub := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	for range 2 { // subscription.created and charge.succeeded
		select {
		case <-delivered:
		case <-time.After(10 * time.Second):
			t.Fatal("the webhooks were not delivered")
		}
	}

	// rebill serve samples River's queues every 15 s; a test node does not.
	require.NoError(t, metrics.SampleQueues(context.Background(), b.pool, []string{river.QueueDefault, notify.Queue}))

	registry, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
	require.True(t, ok)
	// The reconciliation gauges appear once the leader's first reconcile
	// tick has run, just after the start.
	// The API listener's scrape leaves the internal-only families out; the
	// internal listener's handler serves them too, and is what is linted.
	var exposition []byte
	var empty []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		public := sampleNames(t, scrape(t, b.url()))
		for name := range public {
			require.False(t, strings.HasPrefix(name, metrics.InternalOnlyPrefix), "the API listener serves %s", name)
		}
		internal := httptest.NewRecorder()
		metrics.Handler().ServeHTTP(internal, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		exposition = internal.Body.Bytes()
		empty = familiesWithoutSamples(registry, sampleNames(t, exposition))
		if len(empty) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Empty(t, empty, "registered families with no sample in the scrape escape promtool's check")

	report, err := promtoolCheckMetrics(t, exposition)
	require.NoError(t, err, "promtool check metrics:\n%s", report)
	require.Empty(t, strings.TrimSpace(report), "promtool check metrics reports problems")
	t.Logf("promtool check metrics: %d sample names in %d bytes, no problem", len(sampleNames(t, exposition)), len(exposition))

	bad := []byte("# HELP x_latency_seconds Latency.\n# TYPE x_latency_seconds gauge\nx_latency_seconds{quantile=\"0.5\"} 1\n")
	report, err = promtoolCheckMetrics(t, bad)
	require.Error(t, err, "a gauge with a quantile label is refused")
	require.Contains(t, report, "quantile")
}
