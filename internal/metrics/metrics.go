// Package metrics holds rebill's Prometheus collectors, registered once on
// the default registry that /metrics serves, so every package reports into
// the same families however many servers a test process starts.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// HTTP requests, by chi route pattern (never the raw path, which would
// explode cardinality with ids), method and status.
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
