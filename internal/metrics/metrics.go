// Package metrics holds rebill's Prometheus collectors, registered once on
// the default registry that /metrics serves, so every package reports into
// the same families however many servers a test process starts.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// HTTP requests, by chi route pattern (never the raw path, which would
// explode cardinality with ids), method and status. /metrics needs no key,
// so every label value comes from a closed set (the API's methods, else
// "other"): a value taken from a request would let anyone add series.
var (
	HTTPRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_http_requests_total",
		Help: "HTTP requests served, by route pattern, method and status.",
	}, []string{"route", "method", "status"})
	HTTPDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rebill_http_request_duration_seconds",
		Help:    "HTTP request latency, by route pattern, method and status.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route", "method", "status"})
)

// Idempotency outcomes other than a first execution.
var (
	IdempotencyReplays = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_idempotency_replays_total",
		Help: "Requests answered from a stored idempotent response.",
	})
	IdempotencyConflicts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_idempotency_conflicts_total",
		Help: "Requests refused with 409 because the same key was still in flight.",
	})
	IdempotencyMismatches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_idempotency_mismatches_total",
		Help: "Requests refused with 422 because the key was used for a different request.",
	})
	IdempotencyTakeovers = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_idempotency_lease_takeovers_total",
		Help: "Retries that took over a key whose lease had expired (the first request crashed).",
	})
	IdempotencyDeleted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_idempotency_records_deleted_total",
		Help: "Idempotency records deleted after their time to live.",
	})
)

// The charge pipeline, by stage: scan, authorize, capture, void, reconcile.
var (
	StageRuns = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_charge_stage_runs_total",
		Help: "Charge pipeline stage executions, by stage and outcome.",
	}, []string{"stage", "outcome"})
	StageDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rebill_charge_stage_duration_seconds",
		Help:    "Charge pipeline stage duration, gateway call included, by stage.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"stage"})
	Retries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_charge_retries_total",
		Help: "Technical retries and snoozes of charge jobs, by stage and reason (unavailable, circuit_open, unknown_outcome, error).",
	}, []string{"stage", "reason"})
	ChargeTransitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_charges_total",
		Help: "Charges entering each status (a charge counts once per status it reaches).",
	}, []string{"status"})
	PeriodsEnqueued = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_periods_enqueued_total",
		Help: "Subscription periods for which the scan created a charge and enqueued its authorize job.",
	})
	PeriodsSkipped = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_periods_skipped_total",
		Help: "Missed periods older than the catch-up limit, skipped instead of charged.",
	})
	ReviewQueueSize = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_review_queue_size",
		Help: "Charges in unknown or requires_review, as of the last scan.",
	})
)

// GatewayCircuitOpen is 1 while a gateway's circuit breaker is open (calls
// to it paused, its charges waiting), else 0.
var GatewayCircuitOpen = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Name: "rebill_gateway_circuit_open",
	Help: "1 while the gateway's circuit breaker is open and its charges wait, else 0.",
}, []string{"gateway"})

// TimeStage starts timing one run of a pipeline stage; call the returned
// function when it ends. Durations are wall time, whatever the service
// clock says: they measure the machine, not the billing calendar.
func TimeStage(stage string) func() {
	start := time.Now()
	return func() { StageDuration.WithLabelValues(stage).Observe(time.Since(start).Seconds()) }
}
