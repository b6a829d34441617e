package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/openapitest"
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
