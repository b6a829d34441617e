package metrics

import (
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// InternalOnlyPrefix starts the names of the families only the internal
// listener (REBILL_METRICS_ADDR) serves: the experiments' series name every
// experiment and arm with their outcomes, which GET /v1/experiments shows
// to staff only, and /metrics needs no key.
const InternalOnlyPrefix = "rebill_experiment_"

// Handler serves every family: /metrics on the internal listener.
func Handler() http.Handler { return promhttp.Handler() }

// PublicHandler serves /metrics on the API listener (REBILL_METRICS_ADDR
// unset): every family except the internal-only ones.
func PublicHandler() http.Handler {
	return promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer,
		promhttp.HandlerFor(withoutInternal{prometheus.DefaultGatherer}, promhttp.HandlerOpts{}))
}

type withoutInternal struct{ prometheus.Gatherer }

func (g withoutInternal) Gather() ([]*dto.MetricFamily, error) {
	families, err := g.Gatherer.Gather()
	return slices.DeleteFunc(families, func(f *dto.MetricFamily) bool {
		return strings.HasPrefix(f.GetName(), InternalOnlyPrefix)
	}), err
}
