// Package metrics holds rebill's Prometheus collectors, registered once on
// the default registry that /metrics serves, so every package reports into
// the same families however many servers a test process starts.
package metrics

import (
	"strings"
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
	ChargeTransitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_charges_total",
		Help: "Charges entering each status (a charge counts once per status it reaches).",
	}, []string{"status"})
	// ExperimentCharges carries experiment and arm labels from the
	// experiments file only (a closed set): a record naming an experiment
	// or arm no longer configured is not counted.
	ExperimentCharges = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_experiment_charges_total",
		Help: "Charges in an experiment arm entering each status, by experiment and arm (the arm recorded on the charge).",
	}, []string{"experiment", "arm", "status"})
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
	RegistryAbandoned = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_registry_postings_abandoned",
		Help: "Registry postings abandoned (sent, fate unknown, money released; their jobs ask the registry until it says, and annul the payment if it accepted it), as of the last registry sweep on this node.",
	})
	RegistryAbandonedOverdue = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_registry_postings_abandoned_overdue",
		Help: "Registry postings abandoned longer than REBILL_UNAVAILABLE_FOR (service clock), as of the last registry sweep on this node: RebillRegistryPostingAbandoned fires.",
	})
	ZhkhReportsOverdue = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_zhkh_reports_overdue",
		Help: "Housing payments whose report to GIS ZhKH (or its cancellation after a refund) is past the deadline the rules set (the end of the Moscow day after the capture or refund), as of the last GIS ZhKH sweep on this node: RebillZhkhReportOverdue fires.",
	})
	ZhkhReportsInReview = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rebill_zhkh_reports_in_review",
		Help: "Housing payment reports awaiting a person (GIS ZhKH refused them, or their payment was refunded in part), as of the last GIS ZhKH sweep on this node: RebillZhkhReportRefused fires.",
	})
	ZhkhReportRuns = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_zhkh_report_runs_total",
		Help: "Runs of the GIS ZhKH report and cancellation jobs, by step (report, cancel) and outcome.",
	}, []string{"step", "outcome"})
)

// Every step and outcome of the GIS ZhKH jobs is exported from the start,
// at 0: a node that has reported nothing yet still shows the families its
// alerts and dashboards read, and a rate over a series that appears only
// with its first run would miss that run.
func init() {
	for step, outcomes := range map[string][]string{
		"report": {"accepted", "refused", "cancelled_there", "stale", "answer_lost", "pending", "unavailable", "error"},
		"cancel": {"cancelled", "never_sent", "stale", "wait"},
	} {
		for _, o := range outcomes {
			ZhkhReportRuns.WithLabelValues(step, o)
		}
	}
}

// RetryReason is why a job retries or waits instead of finishing: the
// closed set of rebill_charge_retries_total's reason label. Its HELP lists
// RetryReasons, so the two cannot disagree.
type RetryReason string

const (
	// RetryGatewayUnavailable: the gateway answered that it did nothing (503, refused connection).
	RetryGatewayUnavailable RetryReason = "gateway_unavailable"
	// RetryGatewayCircuitOpen: the gateway's circuit breaker refused the call.
	RetryGatewayCircuitOpen RetryReason = "gateway_circuit_open"
	// RetryUnknownOutcome: no answer came (timeout, reset); the outcome is looked up.
	RetryUnknownOutcome RetryReason = "unknown_outcome"
	// RetryError: any other failure of the job (database, bug); River retries it.
	RetryError RetryReason = "error"
	// RetrySlotsInFlight: the charge waits for a slot of its declines velocity limit.
	RetrySlotsInFlight RetryReason = "velocity_slots_in_flight"
	// RetryRegistryNotConfigured: a fine waits for the payment registry to be configured.
	RetryRegistryNotConfigured RetryReason = "registry_not_configured"
	// RetryRegistryUnavailable: the payment registry did nothing with a posting.
	RetryRegistryUnavailable RetryReason = "unavailable"
	// RetryPostingOpen: a fine's new hold waits for the registry to settle an earlier attempt's posting.
	RetryPostingOpen RetryReason = "registry_posting_open"
	// RetryDiscarded: River discarded a hold's release job with the hold not released; the scan runs it again.
	RetryDiscarded RetryReason = "discarded"
)

// RetryReasons lists every RetryReason.
var RetryReasons = []RetryReason{RetryGatewayUnavailable, RetryGatewayCircuitOpen, RetryUnknownOutcome, RetryError,
	RetrySlotsInFlight, RetryRegistryNotConfigured, RetryRegistryUnavailable, RetryDiscarded, RetryPostingOpen}

// Stages are the pipeline's stages: the stage label values of
// rebill_charge_stage_duration_seconds and rebill_charge_stage_runs_total.
var Stages = []string{"scan", "authorize", "capture", "void", "reconcile", "release_hold", "posting", "annulment"}

// RetryStages are the stages whose jobs retry or wait: the stage label
// values of rebill_charge_retries_total.
var RetryStages = []string{"authorize", "capture", "void", "reconcile", "release_hold", "posting"}

var retries = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_charge_retries_total",
	Help: "Technical retries and snoozes of charge jobs, by stage and reason (" + joinReasons() + ").",
}, []string{"stage", "reason"})

func joinReasons() string {
	names := make([]string, len(RetryReasons))
	for i, r := range RetryReasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// ZeroRetries creates the stage's series for reason at 0 (see RetryStages).
func ZeroRetries(stage string, reason RetryReason) { retries.WithLabelValues(stage, string(reason)) }

// Retry counts one retry or snooze of a stage's job.
func Retry(stage string, reason RetryReason) { retries.WithLabelValues(stage, string(reason)).Inc() }

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
