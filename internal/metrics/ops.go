package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// InspectorStuck counts operations the inspector found stuck, by kind; the
// name is fixed here so the alert rules and the inspector agree on it.
var InspectorStuck = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_inspector_stuck_total",
	Help: "Operations the inspector found stuck (kicked or sent to review), by kind.",
}, []string{"kind"})
