package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/platform/metrics"
)

// TestMetricsRouteFollowsMetricsElsewhere: /metrics is served here by
// default, and answers the documented 404 once it has a listener of its own
// (REBILL_METRICS_ADDR).
func TestMetricsRouteFollowsMetricsElsewhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		elsewhere bool
		want      int
	}{{false, http.StatusOK}, {true, http.StatusNotFound}} {
		srv := httptest.NewServer(openapitest.Wrap(t, api.NewServer(api.Deps{Logger: zerolog.Nop(), MetricsElsewhere: tc.elsewhere})))
		res, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		res.Body.Close()
		srv.Close()
		require.Equal(t, tc.want, res.StatusCode, "MetricsElsewhere=%v", tc.elsewhere)
	}
}

// The API listener's /metrics, which needs no key, never shows the
// experiments' series (their names and arms are for staff); the internal
// listener's handler does.
func TestPublicMetricsHideExperiments(t *testing.T) {
	t.Parallel()
	metrics.ExperimentCharges.WithLabelValues("public-metrics-probe", "arm-b", "succeeded").Inc()
	srv := httptest.NewServer(openapitest.Wrap(t, api.NewServer(api.Deps{Logger: zerolog.Nop()})))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "rebill_http_requests_total", "the other families are served")
	require.NotContains(t, string(body), "rebill_experiment_")
	require.NotContains(t, string(body), "public-metrics-probe")

	internal := httptest.NewRecorder()
	metrics.Handler().ServeHTTP(internal, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, internal.Body.String(), `rebill_experiment_charges_total{arm="arm-b",experiment="public-metrics-probe",status="succeeded"} 1`)
}
