package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Gateway health: every call the charge pipeline makes, by gateway,
// operation (authorize, capture, void, lookup_<op>) and outcome. The
// outcomes succeeded, declined, failed and not_found are answers; the
// others (unavailable, unknown, circuit_open, error) are not, and their
// share is what the success-rate alert watches.
var (
	GatewayCalls = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_gateway_calls_total",
		Help: "Gateway calls of the charge pipeline, by gateway, operation and outcome.",
	}, []string{"gateway", "op", "outcome"})
	GatewayCallDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rebill_gateway_call_duration_seconds",
		Help:    "Gateway call latency, by gateway and operation.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"gateway", "op"})
)

// Webhook deliveries: attempts by outcome (notify.Outcomes) and
// how long after the event's publication an attempt was made.
var (
	WebhookDeliveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_webhook_deliveries_total",
		Help: "Webhook delivery attempts, by outcome (delivered, retrying, failed: given up, address_refused: given up at once).",
	}, []string{"outcome"})
	WebhookDeliveryLag = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "rebill_webhook_delivery_lag_seconds",
		Help:    "Time from an event's publication to a delivery attempt of it (real time).",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
	})
)

// RetentionDeleted counts the rows the events retention
// (REBILL_EVENTS_RETENTION) deleted, by table (notify.RetentionTables):
// the events and their delivery attempts.
var RetentionDeleted = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_retention_deleted_total",
	Help: "Rows deleted by the events retention (REBILL_EVENTS_RETENTION), by table (events, webhook_attempts).",
}, []string{"table"})

// The billing scan's heartbeat: an alert fires when no node has finished a
// scan for three intervals.
var (
	ScanLastRun = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_scan_last_run_timestamp_seconds",
		Help: "Unix time (wall clock) at which this node last finished a billing scan; 0 if it never did.",
	})
	ScanInterval = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_scan_interval_seconds",
		Help: "REBILL_SCAN_INTERVAL of this node, so that alerts need not repeat it.",
	})
)

// InspectorStuck counts operations the inspector found stuck, by kind; the
// name is fixed here so the alert rules and the inspector agree on it.
var InspectorStuck = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_inspector_stuck_total",
	Help: "Operations the inspector found stuck (kicked or sent to review), by kind.",
}, []string{"kind"})

// River's queues as the database shows them, sampled by SampleQueues.
var (
	RiverJobs = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_river_jobs",
		Help: "River jobs not yet finished, by queue and state (available, scheduled, retryable, running).",
	}, []string{"queue", "state"})
	RiverQueueLag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_river_queue_lag_seconds",
		Help: "How long the oldest available job of the queue has been due; 0 when none waits.",
	}, []string{"queue"})
)

// ScanFinished records that a billing scan finished now. Wall time, like
// TimeStage: the alert compares it with Prometheus' clock, not the
// billing calendar's.
func ScanFinished() { ScanLastRun.Set(float64(time.Now().UnixNano()) / 1e9) }
