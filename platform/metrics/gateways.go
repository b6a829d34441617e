package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// GatewayHealth is one gateway's health as a node sees it, for the
// rebill_gateway_* gauges.
type GatewayHealth struct {
	Gateway                string
	Calls                  int
	ErrorRate, TimeoutRate float64
	P50Seconds, P95Seconds float64
	// LatencyCount and LatencySumSeconds cover every call since the node
	// started: a summary's count and sum are counters, only its quantiles
	// look at the window.
	LatencyCount          uint64
	LatencySumSeconds     float64
	CircuitOpen, HalfOpen bool
}

// gatewayHealthSource is read at every scrape: the figures are computed
// from the window then, not on every call.
var gatewayHealthSource atomic.Pointer[func() []GatewayHealth]

// ReportGatewayHealth sets where the rebill_gateway_* gauges are read from
// (the node's gateways). The last call wins: one node per process in
// production; tests that start several see the last one's.
func ReportGatewayHealth(source func() []GatewayHealth) { gatewayHealthSource.Store(&source) }

var (
	gatewayCallsDesc = prometheus.NewDesc("rebill_gateway_calls",
		"Calls this node made to the gateway in the health window (5m).", []string{"gateway"}, nil)
	gatewayErrorRateDesc = prometheus.NewDesc("rebill_gateway_error_rate",
		"Share of the window's calls that got no verdict (unavailable or no answer), 0..1.", []string{"gateway"}, nil)
	gatewayTimeoutRateDesc = prometheus.NewDesc("rebill_gateway_timeout_rate",
		"Share of the window's calls whose answer never came (timeout, reset), 0..1.", []string{"gateway"}, nil)
	gatewayLatencyDesc = prometheus.NewDesc("rebill_gateway_latency_seconds",
		"Gateway call latency: quantiles of the health window's (5m) most recent calls; count and sum of every call since the node started.",
		[]string{"gateway"}, nil)
	gatewayCircuitDesc = prometheus.NewDesc("rebill_gateway_circuit_state",
		"The gateway's circuit: 0 closed, 1 half open, 2 open.", []string{"gateway"}, nil)
)

type gatewayCollector struct{}

func (gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gatewayCallsDesc, gatewayErrorRateDesc, gatewayTimeoutRateDesc,
		gatewayLatencyDesc, gatewayCircuitDesc} {
		ch <- d
	}
}

func (gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	source := gatewayHealthSource.Load()
	if source == nil {
		return
	}
	for _, h := range (*source)() {
		circuit := 0.0
		switch {
		case h.CircuitOpen:
			circuit = 2
		case h.HalfOpen:
			circuit = 1
		}
		ch <- prometheus.MustNewConstMetric(gatewayCallsDesc, prometheus.GaugeValue, float64(h.Calls), h.Gateway)
		ch <- prometheus.MustNewConstMetric(gatewayErrorRateDesc, prometheus.GaugeValue, h.ErrorRate, h.Gateway)
		ch <- prometheus.MustNewConstMetric(gatewayTimeoutRateDesc, prometheus.GaugeValue, h.TimeoutRate, h.Gateway)
		ch <- prometheus.MustNewConstSummary(gatewayLatencyDesc, h.LatencyCount, h.LatencySumSeconds,
			map[float64]float64{0.5: h.P50Seconds, 0.95: h.P95Seconds}, h.Gateway)
		ch <- prometheus.MustNewConstMetric(gatewayCircuitDesc, prometheus.GaugeValue, circuit, h.Gateway)
	}
}

func init() { prometheus.MustRegister(gatewayCollector{}) }
