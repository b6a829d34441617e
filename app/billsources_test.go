package app

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/metrics"
)

// The file's sources are pulled, one per kind, with their metrics
// created; without it, dev mode pulls its simulated sources and
// production none, saying so at start.
func TestBillSourcesWiring(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)

	require.Empty(t, billSources(config.Config{}, nil, log))
	require.Contains(t, logs.String(), "no bill sources configured")

	dev := billSources(config.Config{Dev: true}, nil, log)
	require.IsType(t, autopay.DevSource{}, dev[enrollments.Housing])
	require.IsType(t, autopay.DevSource{}, dev[enrollments.Fines])

	cfg := config.Config{Dev: true, BillSources: []config.BillSource{{Name: "wiring-gmp", Kind: "http", Bills: "fines",
		BaseURL: "https://gmp.example", Timeout: time.Second, BatchSize: 100, RateLimit: 1, RereadWindow: time.Hour,
		SilentAfter: 45 * time.Minute}}}
	configured := billSources(cfg, nil, log)
	require.Len(t, configured, 1, "the file replaces the simulated sources")
	require.IsType(t, &billsource.Client{}, configured[enrollments.Fines])
	require.Equal(t, autopay.SourceInfo{Name: "wiring-gmp", BatchSize: 100, RereadWindow: time.Hour},
		configured[enrollments.Fines].Info())
	require.Equal(t, float64(45*60), testutil.ToFloat64(metrics.BillSourceSilentAfter.WithLabelValues("wiring-gmp")))
	require.Contains(t, logs.String(), `"source":"wiring-gmp"`)
}
