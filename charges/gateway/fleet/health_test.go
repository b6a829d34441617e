package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

func TestHealthWindowRollsAndCountsOnlyOutages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := newHealthTracker(func() time.Time { return now })
	require.Equal(t, Health{}, h.snapshot(), "no calls: zero rates, zero latencies")

	for i := range 100 { // 1..100 ms
		var err error
		switch {
		case i < 10:
			err = gateway.ErrUnknownOutcome // timeouts count as errors too
		case i < 30:
			err = gateway.ErrUnavailable
		}
		h.observe(time.Duration(i+1)*time.Millisecond, err)
	}
	s := h.snapshot()
	require.Equal(t, 100, s.Calls)
	require.InDelta(t, 0.30, s.ErrorRate, 1e-9)
	require.InDelta(t, 0.10, s.TimeoutRate, 1e-9)
	require.Equal(t, 50*time.Millisecond, s.P50)
	require.Equal(t, 95*time.Millisecond, s.P95)

	now = now.Add(4 * time.Minute)
	for range 100 {
		h.observe(time.Second, nil) // declines and successes are answers
	}
	s = h.snapshot()
	require.Equal(t, 200, s.Calls)
	require.InDelta(t, 0.15, s.ErrorRate, 1e-9)
	require.Equal(t, time.Second, s.P95)

	now = now.Add(70 * time.Second) // the first 100 calls are 5m10s old
	s = h.snapshot()
	require.Equal(t, 100, s.Calls)
	require.Zero(t, s.ErrorRate)
	require.Equal(t, time.Second, s.P50)

	now = now.Add(HealthWindow)
	require.Equal(t, Health{CallsSinceStart: 200, LatencySinceStart: 105050 * time.Millisecond}, h.snapshot(),
		"the window is empty; the summary's count and sum keep every call (100 of 1..100 ms, 100 of 1 s)")
}

func TestHealthLatencyRingKeepsTheMostRecent(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := newHealthTracker(func() time.Time { return now })
	for range latencySamples {
		h.observe(time.Hour, nil)
	}
	for range latencySamples {
		h.observe(time.Millisecond, nil)
	}
	s := h.snapshot()
	require.Equal(t, 2*latencySamples, s.Calls)
	require.Equal(t, time.Millisecond, s.P95, "older samples were overwritten")
}

// The rebill_gateway_* gauges are this node's view, read at scrape time.
func TestHealthIsExportedAsGauges(t *testing.T) {
	t.Parallel()
	refusing := gatewaytest.New(t, "gauged")
	refusing.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	gws := New([]gateway.Gateway{refusing}, Breaker{Window: time.Minute, MinCalls: 4, FailureRatio: 0.5, OpenFor: time.Hour})
	gws.ReportHealth()
	g, err := gws.Gateway("gauged")
	require.NoError(t, err)
	for range 4 {
		_, _ = g.Authorize(context.Background(), gateway.Request{})
	}
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gateway" && l.GetValue() == "gauged" && m.GetGauge() != nil {
					values[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Equal(t, 4.0, values["rebill_gateway_calls"])
	require.Equal(t, 1.0, values["rebill_gateway_error_rate"])
	require.Equal(t, 0.0, values["rebill_gateway_timeout_rate"])
	require.Equal(t, 2.0, values["rebill_gateway_circuit_state"], "open")
	require.Equal(t, 1.0, values["rebill_gateway_circuit_open"])
}
