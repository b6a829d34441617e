package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
)

// queueSampleInterval is how often a node samples River's queues for
// /metrics: about one Prometheus scrape.
const queueSampleInterval = 15 * time.Second

// tracerProvider is the process' provider as tracing.Setup left it (the
// no-op one unless OTEL_EXPORTER_OTLP_ENDPOINT is set), read when a node
// is built.
func tracerProvider() trace.TracerProvider { return otel.GetTracerProvider() }

// riverMiddleware spans every job River works or inserts (otelriver, River's
// own OpenTelemetry middleware; job args are not recorded).
func riverMiddleware() []rivertype.Middleware {
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              tracerProvider(),
		EnableWorkSpanJobKindSuffix: true,
	})}
}

// startMetrics samples River's queues for /metrics and, when
// REBILL_METRICS_ADDR is set, serves /metrics alone there, with the
// internal-only families (experiments) that the API listener never serves. The returned
// function stops both; calls after the first do nothing.
func startMetrics(ctx context.Context, cfg config.Config, log zerolog.Logger, db pg.DBTX) (func(context.Context), error) {
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go metrics.SampleQueuesEvery(sampleCtx, db, []string{river.QueueDefault, notify.Queue}, queueSampleInterval, func(err error) {
		log.Warn().Err(err).Msg("sample River queues for /metrics")
	})
	if cfg.MetricsAddr == "" {
		return func(context.Context) { stopSampling() }, nil
	}
	listener, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		stopSampling()
		return nil, fmt.Errorf("listen on REBILL_METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("metrics listener failed")
		}
	}()
	log.Info().Str("addr", "http://"+listener.Addr().String()+"/metrics").Msg("metrics listening")
	var once sync.Once
	return func(ctx context.Context) {
		once.Do(func() {
			stopSampling()
			if err := server.Shutdown(ctx); err != nil {
				log.Error().Err(err).Msg("metrics listener shutdown")
			}
		})
	}, nil
}

// zeroMetrics creates at 0 the series of the labelled counters whose label
// values are known at start (closed sets, and the configured gateways).
// Prometheus' increase() and rate() see only what a series gained between
// two scrapes: a series born at 1 when its first event happens would hide
// that event from every alert and panel built on them.
func zeroMetrics(gateways []fleet.GatewayStatus, registries []string, reseal []vault.Step) {
	for _, status := range charges.Statuses {
		metrics.ChargeTransitions.WithLabelValues(string(status))
	}
	for _, stage := range metrics.Stages {
		metrics.StageDuration.WithLabelValues(stage)
	}
	for _, stage := range metrics.RetryStages {
		for _, reason := range metrics.RetryReasons {
			metrics.ZeroRetries(stage, reason)
		}
	}
	for _, kind := range charges.StuckKinds {
		metrics.InspectorStuck.WithLabelValues(string(kind))
	}
	for _, action := range inspector.Actions {
		metrics.InspectorActions.WithLabelValues(action)
	}
	for _, outcome := range notify.Outcomes {
		metrics.WebhookDeliveries.WithLabelValues(outcome)
	}
	for _, table := range notify.RetentionTables {
		metrics.RetentionDeleted.WithLabelValues(table)
	}
	for _, limit := range []velocity.Limit{velocity.Creations, velocity.PaymentMethodChanges, velocity.Declines} {
		metrics.VelocityLimited.WithLabelValues(limit.Name)
	}
	for _, step := range reseal {
		metrics.SecretsResealed.WithLabelValues(step.Kind)
	}
	for _, g := range gateways {
		for _, kind := range books.Kinds {
			metrics.ReconciliationDiscrepancies.WithLabelValues(g.Name, string(kind))
		}
		metrics.RefundsUnknown.WithLabelValues(g.Name)
		metrics.RefundsUnknownOverdue.WithLabelValues(g.Name)
	}
	for _, name := range registries {
		for _, kind := range books.RegistryKinds {
			metrics.RegistryReconciliationDiscrepancies.WithLabelValues(name, string(kind))
		}
	}
}

// buildVersion is the module version traces report as service.version.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
