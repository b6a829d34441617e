package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/reports"
)

// ops are the operators' pieces of a node: the inspector, the daily
// reconciliation and the reads behind /v1/reconciliation and
// /v1/reports/daily, which go to the replica when REBILL_REPLICA_URL is set.
type ops struct {
	inspector      *inspector.Inspector
	reconciler     *books.Reconciler
	reconciliation reconciliationReads
	reports        reportReads
}

// registryAnnulWithin bounds how long (service clock) after a fine's
// posting or charge last changed a payment the registry accepted without
// a capture, or still processes, may stand before the registry
// reconciliation and the audit report it: the annulment is a job that
// retries for hours while the registry is down.
const registryAnnulWithin = 24 * time.Hour

// buildOps wires them, enqueuing through jobs; the registry gateways of
// poster (nil without a registry) are reconciled beside the gateways. The
// replica's pool is closed with svc.
func buildOps(ctx context.Context, cfg config.Config, svc *Service, pool *pgxpool.Pool, gateways []fleet.Configured,
	poster *charges.Poster, jobs *river.Client[pgx.Tx], chargeStore *charges.Store, log zerolog.Logger) (ops, error) {
	read := pg.DBTX(pool)
	if cfg.ReplicaURL != "" {
		replica, err := openReplica(ctx, cfg.ReplicaURL)
		if err != nil {
			return ops{}, err
		}
		svc.closers = append(svc.closers, replica.Close)
		read = replica
	}
	byName := make(map[string]gateway.Gateway, len(gateways))
	settings := make(map[string]fleet.Settings, len(gateways))
	for _, g := range gateways {
		byName[g.Gateway.Name()] = g.Gateway
		settings[g.Gateway.Name()] = g.Settings
	}
	registries := map[string]registry.Gateway{}
	if poster != nil {
		for _, g := range poster.Gateways.Gateways() {
			registries[g.Name()] = g
		}
	}
	rates := func(gateway, currency string) int64 {
		bps, _ := settings[gateway].Commission(currency)
		return bps
	}
	o := ops{
		inspector: &inspector.Inspector{Pool: pool, Jobs: jobs, Charges: chargeStore, Clock: svc.Clock, Logger: log.With().Str("component", "inspector").Logger(),
			Thresholds: inspector.Thresholds{NoJobAfter: cfg.InspectNoJobAfter, UnknownAfter: cfg.InspectUnknownAfter,
				HoldWarnAfter: cfg.InspectHoldWarn}, Gateways: slices.Sorted(maps.Keys(byName))},
		reconciler: &books.Reconciler{Pool: pool, Jobs: jobs, Read: read, Gateways: byName, Registries: registries,
			AnnulWithin: registryAnnulWithin, Clock: svc.Clock, Days: cfg.ReconcileDays,
			JobTimeout: cfg.RescueAfter - 5*time.Second, Logger: log.With().Str("component", "reconcile").Logger()},
		reconciliation: reconciliationReads{read: read, gateways: byName, registries: registries},
		reports:        reportReads{read: read, rates: rates},
	}
	svc.Inspector, svc.Reconciler = o.inspector, o.reconciler
	return o, nil
}

// openReplica opens the read replica's pool: a few connections, for
// reports and reconciliation only.
func openReplica(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := config.ParsePoolConfig(url)
	if err != nil {
		return nil, fmt.Errorf("REBILL_REPLICA_URL: %w", err)
	}
	cfg.MaxConns = min(cfg.MaxConns, 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open REBILL_REPLICA_URL: %w", err)
	}
	return pool, nil
}

func (o ops) register(workers *river.Workers) {
	books.Register(workers, o.reconciler)
	river.AddWorker(workers, &inspector.Worker{Inspector: o.inspector})
}

func (o ops) periodicJobs(cfg config.Config) []*river.PeriodicJob {
	return []*river.PeriodicJob{books.PeriodicJob(), inspector.PeriodicJob(cfg.InspectInterval)}
}

type reconciliationReads struct {
	read       pg.DBTX
	gateways   map[string]gateway.Gateway
	registries map[string]registry.Gateway
}

func (r reconciliationReads) Day(ctx context.Context, gw string, day time.Time) (books.Result, error) {
	return books.Get(ctx, r.read, gw, day)
}

func (r reconciliationReads) Known(gw string) bool { _, ok := r.gateways[gw]; return ok }

func (r reconciliationReads) RegistryDay(ctx context.Context, registry string, day time.Time) (books.Result, error) {
	return books.GetRegistry(ctx, r.read, registry, day)
}

func (r reconciliationReads) KnownRegistry(registry string) bool {
	_, ok := r.registries[registry]
	return ok
}

// registryNames are the registry gateways reconciled, for their metrics.
func (r reconciliationReads) registryNames() []string {
	names := make([]string, 0, len(r.registries))
	for name := range r.registries {
		names = append(names, name)
	}
	return names
}

type reportReads struct {
	read  pg.DBTX
	rates reports.Rates
}

func (r reportReads) Daily(ctx context.Context, day time.Time) (reports.Daily, error) {
	return reports.Build(ctx, r.read, day, r.rates)
}
