package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Bill sources, by source name: a closed set, the configured sources (or
// dev mode's simulated ones), each created at 0 by ZeroBillSource.
var (
	BillSourceBills = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_bill_source_bills_total",
		Help: "Bills read from the bill source (re-reads of the trailing window included), by source.",
	}, []string{"source"})
	BillSourceErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_bill_source_pull_errors_total",
		Help: "Pulls of the bill source that failed (after the request retries), by source.",
	}, []string{"source"})
	BillSourceLastSuccess = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_bill_source_last_success_timestamp_seconds",
		Help: "Unix time (wall clock) of the source's last successful pull by any node, as this node last read it; 0 until this node pulls it.",
	}, []string{"source"})
	BillSourceSilentAfter = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_bill_source_silent_after_seconds",
		Help: "The source's silent_after: without a successful pull this long, RebillBillSourceSilent fires.",
	}, []string{"source"})
)

// ZeroBillSource creates a source's series: its counters at 0 and its
// silence threshold.
func ZeroBillSource(source string, silentAfter time.Duration) {
	BillSourceBills.WithLabelValues(source)
	BillSourceErrors.WithLabelValues(source)
	BillSourceLastSuccess.WithLabelValues(source)
	BillSourceSilentAfter.WithLabelValues(source).Set(silentAfter.Seconds())
}

// BillSourceAnswered records the source's last successful pull, at (wall
// clock, as the database keeps it for every node).
func BillSourceAnswered(source string, at time.Time) {
	BillSourceLastSuccess.WithLabelValues(source).Set(float64(at.UnixNano()) / 1e9)
}
