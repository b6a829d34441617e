package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rebill/rebill/ops"
	"github.com/rebill/rebill/testkit/dbtest"
)

// exportedMetrics lists every series name the process' registry can
// export: each registered family (vectors included, children or not) and,
// for the histograms and summaries gathered, their _bucket/_sum/_count
// series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	registry, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
	require.True(t, ok, "the default registerer is a *prometheus.Registry")
	names := map[string]bool{}
	descs := make(chan *prometheus.Desc)
	go func() {
		registry.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	families, err := registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[f.GetName()+"_bucket"] = true
			fallthrough
		case dto.MetricType_SUMMARY:
			names[f.GetName()+"_sum"] = true
			names[f.GetName()+"_count"] = true
		}
	}
	return names
}

// TestOpsNameOnlyExportedMetrics: every metric the dashboard, the alert
// rules and the rules' tests name is one the service exports, so that a
// renamed metric cannot leave a panel blank or an alert silent. A node
// bills one charge first, so that the histogram vectors have children and
// their _bucket series are really gathered.
func TestOpsNameOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	exported := exportedMetrics(t)

	named := regexp.MustCompile(`\brebill_[a-z0-9_]+`)
	for file, content := range map[string][]byte{
		"ops/grafana/rebill.json": ops.Dashboard, "ops/prometheus/alerts.yml": ops.AlertRules,
		"ops/prometheus/alerts_test.yml": ops.AlertTests,
	} {
		found := named.FindAllString(string(content), -1)
		require.NotEmpty(t, found, file)
		for _, name := range found {
			require.True(t, exported[name], "%s names %s, which rebill does not export", file, name)
		}
	}
	// The check itself can fail: a name the service does not export is caught.
	require.False(t, exported["rebill_charge_stage_duration_seconds_total"])
	require.True(t, exported["rebill_charge_stage_duration_seconds_bucket"])
	require.True(t, exported["rebill_inspector_stuck_total"])
}

// TestTracingSpansRequestJobAndGatewayCall: with a recording tracer
// provider, creating a subscription produces a server span named by its
// route, River work spans for its charge's jobs, and a client span around
// each gateway call, the call's span inside its job's; no attribute of any
// span carries the card token or the API key. Not parallel: it swaps the
// process' tracer provider while only it builds nodes.
func TestTracingSpansRequestJobAndGatewayCall(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	previous := otel.GetTracerProvider()
	otel.SetTracerProvider(provider)
	t.Cleanup(func() {
		otel.SetTracerProvider(previous)
		_ = provider.Shutdown(context.Background())
	})
	b := setup(t, 1, nil)
	otel.SetTracerProvider(previous) // nodes read the provider when built

	const token = "tok_ok_trace_8c1f0e5d"
	body := subscriptionBody(token, "month")
	sub := b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	charge := b.waitCharges(t, sub, 1, "succeeded")[0]["id"].(string)

	spanOf := func(name string, attrs ...attribute.KeyValue) sdktrace.ReadOnlySpan {
		for _, s := range recorder.Ended() {
			if s.Name() != name {
				continue
			}
			ok := true
			for _, want := range attrs {
				found := false
				for _, a := range s.Attributes() {
					found = found || a == want
				}
				ok = ok && found
			}
			if ok {
				return s
			}
		}
		return nil
	}
	var capture sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		capture = spanOf("gateway.capture", attribute.String("rebill.charge_id", charge))
		return capture != nil
	}, 10*time.Second, 20*time.Millisecond, "the capture's span ends with its job")

	request := spanOf("POST /v1/subscriptions", attribute.String("http.route", "/v1/subscriptions"))
	require.NotNil(t, request, "server span of the request, named by its route")
	authorize := spanOf("gateway.authorize", attribute.String("rebill.charge_id", charge),
		attribute.String("rebill.subscription_id", sub), attribute.String("rebill.gateway", "sim1"),
		attribute.String("rebill.gateway.outcome", "succeeded"))
	require.NotNil(t, authorize, "client span of the authorize call")
	for _, call := range []sdktrace.ReadOnlySpan{authorize, capture} {
		var job sdktrace.ReadOnlySpan
		for _, s := range recorder.Ended() {
			if s.SpanContext().SpanID() == call.Parent().SpanID() {
				job = s
			}
		}
		require.NotNil(t, job, "%s has a parent span", call.Name())
		require.True(t, strings.HasPrefix(job.Name(), "river.work/"), "%s runs inside a River job span, not %q", call.Name(), job.Name())
	}

	for _, s := range recorder.Ended() {
		for _, a := range s.Attributes() {
			value := a.Value.String()
			require.NotContains(t, value, token, "span %s attribute %s", s.Name(), a.Key)
			require.NotContains(t, value, adminKey, "span %s attribute %s", s.Name(), a.Key)
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				require.NotContains(t, a.Value.String(), token, "span %s event %s", s.Name(), e.Name)
			}
		}
	}
}

// TestMetricsListener: with REBILL_METRICS_ADDR set, /metrics answers
// there (and only /metrics does), and the public listener answers 404 for
// it; without it, the public listener serves /metrics.
func TestMetricsListener(t *testing.T) {
	t.Parallel()
	env := func(t *testing.T) map[string]string {
		return map[string]string{
			"DATABASE_URL":          dbtest.URL(t),
			"REBILL_ADMIN_KEY":      "production-admin-key-0123456789abcdef0123",
			"REBILL_LOG_LEVEL":      "warn",
			"REBILL_DB_MAX_CONNS":   "10",
			"REBILL_ENCRYPTION_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		}
	}
	get := func(url string) (int, string) {
		res, err := procHTTP.Get(url)
		require.NoError(t, err)
		defer res.Body.Close()
		data, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(data)
	}
	t.Run("separate", func(t *testing.T) {
		t.Parallel()
		metricsAddr := fmt.Sprintf("127.0.0.1:%d", procFreePort(t))
		e := env(t)
		e["REBILL_METRICS_ADDR"] = metricsAddr
		node := procStart(t, "metrics-separate", e)
		node.waitReady(t, 60*time.Second)
		status, body := get("http://" + metricsAddr + "/metrics")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "rebill_scan_interval_seconds 60")
		status, _ = get(node.URL + "/metrics")
		require.Equal(t, http.StatusNotFound, status, "the public listener no longer serves /metrics")
		status, _ = get("http://" + metricsAddr + "/healthz")
		require.Equal(t, http.StatusNotFound, status, "the metrics listener serves nothing else")
	})
	t.Run("public", func(t *testing.T) {
		t.Parallel()
		node := procStart(t, "metrics-public", env(t))
		node.waitReady(t, 60*time.Second)
		status, body := get(node.URL + "/metrics")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "rebill_scan_interval_seconds 60")
	})
}
