package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Daily reconciliation with the gateways' books (package reconcile). A
// discrepancy is recorded once, when its day is checked; alert on an
// increase of the counter or on the open gauge.
var (
	ReconciliationDiscrepancies = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_reconciliation_discrepancies_total",
		Help: "Discrepancies found by the daily reconciliation, by gateway and kind.",
	}, []string{"gateway", "kind"})
	ReconciliationOpen = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_reconciliation_open_discrepancies",
		Help: "Discrepancies of the gateway no person has reviewed yet, as of its last reconciled day.",
	}, []string{"gateway"})
	ReconciliationLastDay = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_reconciliation_last_day_timestamp_seconds",
		Help: "Start (Unix seconds, UTC) of the latest day reconciled for the gateway.",
	}, []string{"gateway"})
)

// InspectorActions counts what the inspector did with the stuck operations
// of rebill_inspector_stuck_total (ops.go), by action (kicked, review,
// reported).
var InspectorActions = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_inspector_actions_total",
	Help: "What the inspector did with stuck operations, by action (kicked, review, reported).",
}, []string{"action"})

// Daily reconciliation with the registry's book (package reconcile), per
// registry gateway: the same as the gateways', labelled registry.
var (
	RegistryReconciliationDiscrepancies = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_registry_reconciliation_discrepancies_total",
		Help: "Discrepancies between rebill's postings and captures and the registry's book found by the daily registry reconciliation, by registry gateway and kind.",
	}, []string{"registry", "kind"})
	RegistryReconciliationOpen = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_registry_reconciliation_open_discrepancies",
		Help: "Discrepancies of the registry gateway no person has reviewed yet, as of its last reconciled day.",
	}, []string{"registry"})
	RegistryReconciliationLastDay = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_registry_reconciliation_last_day_timestamp_seconds",
		Help: "Start (Unix seconds, UTC) of the latest day reconciled for the registry gateway.",
	}, []string{"registry"})
)

// Refunds whose outcome is unknown (sent, answer lost): their
// refund_lookup jobs ask the gateway until it says. Set by the inspector
// at each run; overdue ones have been unknown longer than its
// REBILL_INSPECT_UNKNOWN_AFTER, and RebillRefundsUnknownOverdue fires.
var (
	RefundsUnknown = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_refunds_unknown",
		Help: "Refunds whose outcome is unknown (being looked up at the gateway), by gateway, as of the inspector's last run on this node.",
	}, []string{"gateway"})
	RefundsUnknownOverdue = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebill_refunds_unknown_overdue",
		Help: "Refunds unknown longer than the inspector's unknown threshold (service clock), by gateway, as of its last run on this node: RebillRefundsUnknownOverdue fires.",
	}, []string{"gateway"})
)
