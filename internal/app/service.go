package app

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/billing"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/config"
	"github.com/rebill/rebill/internal/metrics"
	"github.com/rebill/rebill/internal/tracing"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/reconcile"
	"github.com/rebill/rebill/scheduler"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/vault"
)

// Service is one rebill node over a migrated database: the HTTP handler
// and the River client (not yet started) whose workers bill.
type Service struct {
	Handler http.Handler
	River   *river.Client[pgx.Tx]
	Biller  *scheduler.Biller
	Clock   clock.Clock
	// Inspector and Reconciler run periodically; tests call them directly.
	Inspector  *inspector.Inspector
	Reconciler *reconcile.Reconciler
	closers    []func()
	// reseal seals every secret under the current key (job secrets_reseal).
	reseal []vault.Step
}

// Close releases what Build started besides River (the in-process
// simulated gateways in dev mode).
func (s *Service) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// Build wires a node. In dev mode it uses the shared manual clock and
// starts the simulated gateways on loopback. The configured gateways are
// checked first (see checkGateways).
func Build(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log zerolog.Logger) (*Service, error) {
	if err := checkGateways(ctx, cfg, log); err != nil {
		return nil, err
	}
	svc := &Service{Clock: clock.Wall{}}
	gatewayConfigs := slices.Clone(cfg.Gateways)
	var dev *api.Dev
	if cfg.Dev {
		_, simConns, clockConns := poolSizes(cfg)
		clockPool, err := pgxpool.NewWithConfig(ctx, withMaxConns(pool.Config(), clockConns))
		if err != nil {
			return nil, fmt.Errorf("open dev clock pool: %w", err)
		}
		svc.closers = append(svc.closers, clockPool.Close)
		manual, err := clock.NewManual(ctx, clockPool, time.Now())
		if err != nil {
			svc.Close()
			return nil, err
		}
		svc.Clock = manual
		baseURL, stopSim, err := startSim(ctx, pool, simConns, simNames, false, true, log.With().Str("component", "gatewaysim").Logger())
		if err != nil {
			svc.Close()
			return nil, err
		}
		svc.closers = append(svc.closers, stopSim)
		gatewayConfigs = append(config.DevGateways(baseURL), gatewayConfigs...)
		dev = &api.Dev{Clock: manual, Gateways: sim.NewStore(pool)}
		log.Warn().Msg("dev mode: manual clock, /v1/dev/* endpoints and simulated gateways sim1..sim5")
	}
	keys, err := keyring(cfg, log)
	if err != nil {
		svc.Close()
		return nil, err
	}
	tokens := &vault.Vault{Pool: pool, Keys: keys, Holders: tokenHolders()}
	gateways, err := buildGateways(gatewayConfigs, cfg.GatewayTimeout, svc.Clock)
	if err != nil {
		svc.Close()
		return nil, err
	}
	for i := range gateways {
		// Tokens are sealed at rest; only the gateway call opens them.
		gateways[i].Gateway = tokens.Gateway(gateways[i].Gateway)
	}
	breaker := charges.DefaultBreaker
	breaker.OpenFor = cfg.BreakerOpenFor
	breakers := charges.Configure(gateways, breaker)
	breakers.ReportHealth()

	// Every transition publishes its event through the recorder, in its
	// own transaction (notify).
	recorder := &notify.Recorder{}
	subs := subscriptions.NewStore(svc.Clock)
	subs.SetEventSink(recorder)
	chargeStore := &charges.Store{Events: recorder}
	retry := charges.RetryPolicy{Base: cfg.RetryBase, Max: cfg.RetryMax, Now: clock.Wall{}.Now}
	poster, registrySim := buildRegistry(cfg, pool, svc.Clock, breakers, retry, log)
	warnNoRegistry(poster, log)
	if poster != nil {
		poster.Charges = chargeStore
	}
	bills, billOutcomes := buildAutopay(cfg, pool, svc.Clock, recorder, log)
	bills.Charges = chargeStore
	bills.Registry = poster != nil
	biller := &scheduler.Biller{Pool: pool, Subscriptions: subs, Clock: svc.Clock, Charges: chargeStore, CatchUpWindow: cfg.CatchUpWindow,
		BatchSize: cfg.ScanBatch, ScanWorkers: cfg.ScanWorkers, ScanTimeout: cfg.RescueAfter - 5*time.Second,
		ScanInterval: cfg.ScanInterval, HoldCheckRetryAfter: 10 * time.Minute,
		Logger: log.With().Str("component", "scheduler").Logger()}
	owners := charges.Owners{Subscriptions: scheduler.Outcomes{Subscriptions: subs, Biller: biller},
		Enrollments: billOutcomes}
	pipeline := &charges.Pipeline{Pool: pool, Store: chargeStore, Gateways: breakers, Owners: owners,
		Clock: svc.Clock, Dunning: cfg.DunningSchedule, CallTimeout: cfg.GatewayTimeout, Retry: retry,
		UnavailableFor: cfg.UnavailableFor, CaptureInline: true, Logger: log.With().Str("component", "charges").Logger(),
		Tracer: tracerProvider().Tracer("github.com/rebill/rebill/charges")}
	if poster != nil {
		pipeline.Postings = poster
	}
	limiter := newLimiter(cfg, svc.Clock)
	pipeline.Declines = newDeclineLimit(limiter, pool)
	biller.Notices = &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: subs, Upcoming: cfg.UpcomingNotice,
		BatchSize: cfg.ScanBatch}
	idem := idempotency.NewStore(pool, cfg.IdempotencyLease)

	policy := notify.URLPolicy{AllowPrivate: cfg.Dev || cfg.WebhookAllowPrivate}

	workers := river.NewWorkers()
	deliver := notify.NewDeliverWorker(pool, keys, policy, cfg.WebhookRetryBase)
	deliver.PerEndpoint = max(2, cfg.WebhookWorkers/4)
	river.AddWorker(workers, deliver)
	river.AddWorker(workers, &idempotency.CleanupWorker{Store: idem, TTL: cfg.IdempotencyTTL})
	river.AddWorker(workers, &scheduler.ScanWorker{Biller: biller})
	svc.reseal = resealSteps(pool, tokens)
	river.AddWorker(workers, &vault.ResealWorker{Steps: svc.reseal, Batch: resealBatch})
	charges.Register(workers, pipeline)
	registerAutopay(workers, bills, poster)
	ops, err := buildOps(ctx, cfg, svc, pool, gateways, log)
	if err != nil {
		svc.Close()
		return nil, err
	}
	ops.register(workers)

	jobTimeout := charges.JobTimeout(breakers.MaxTimeout(cfg.GatewayTimeout))
	if cfg.RescueAfter <= jobTimeout+5*time.Second {
		return nil, fmt.Errorf("REBILL_RESCUE_AFTER (%s) must exceed a charge job's timeout (%s) by more than 5s", cfg.RescueAfter, jobTimeout)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers},
			// Deliveries wait on other people's servers: their own bounded
			// queue, so that a slow receiver never holds up billing.
			notify.Queue: {MaxWorkers: max(1, cfg.WebhookWorkers)}},
		Workers:                     workers,
		MaxAttempts:                 cfg.ChargeMaxAttempts,
		RetryPolicy:                 retry,
		JobTimeout:                  jobTimeout,
		RescueStuckJobsAfter:        cfg.RescueAfter,
		CompletedJobRetentionPeriod: time.Hour,
		FetchCooldown:               cfg.FetchCooldown,
		FetchPollInterval:           cfg.FetchPollInterval,
		PeriodicJobs:                append(append(periodicJobs(cfg), autopayPeriodicJobs(cfg, poster != nil)...), ops.periodicJobs(cfg)...),
		Logger:                      riverLogger(log),
		Middleware:                  riverMiddleware(),
	})
	if err != nil {
		return nil, fmt.Errorf("create River client: %w", err)
	}
	chargeStore.Queue = client
	recorder.Enqueue = client
	svc.Inspector.Jobs = client
	svc.Inspector.Charges = chargeStore
	svc.River = client
	svc.Biller = biller
	if dev != nil {
		dev.ClockMoved = func(ctx context.Context) {
			if _, err := client.Insert(ctx, scheduler.ScanArgs{}, nil); err != nil {
				log.Error().Err(err).Msg("enqueue scan after clock move")
			}
			billsMoved(ctx, client, log)
		}
	}
	ui, stopUI, err := startRiverUI(ctx, client, log)
	if err != nil {
		svc.Close()
		return nil, err
	}
	svc.closers = append(svc.closers, stopUI)
	uses := &billing.Service{Pool: pool, Subscriptions: subs, Biller: biller, Attempts: pipeline,
		KnownGateway: breakers.Known, Clock: svc.Clock, Enrollments: bills.Enrollments, Autopay: bills, Owners: owners,
		Velocity: limiter, Tokens: tokens}
	if dev != nil {
		dev.BillSources = devBillSources(bills, client, log)
		dev.Registry = registrySim
	}
	metrics.ScanInterval.Set(cfg.ScanInterval.Seconds())
	zeroMetrics(breakers.List(), svc.reseal)
	apiKeys := apikeys.NewStore(pool, cfg.AdminKey)
	svc.Handler = tracing.Handler(api.NewServer(api.Deps{
		Keys: apiKeys, Idempotency: idem, Billing: uses, Ready: pool.Ping,
		KnownGateway: breakers.Known, Gateways: breakers, Dev: dev, Logger: log,
		Webhooks:         &notify.Webhooks{Pool: pool, Keys: keys, Policy: policy, Clock: svc.Clock, Enqueue: client},
		MetricsElsewhere: cfg.MetricsAddr != "",
		Autopay:          uses, Clock: svc.Clock,
		Reconciliation: ops.reconciliation, Reports: ops.reports,
		RiverUI: ui,
		Console: console.New(console.Options{Pool: pool, Keys: apiKeys, Billing: uses, Autopay: uses, Gateways: breakers,
			Reconciliation: ops.reconciliation, Reports: ops.reports, Clock: svc.Clock,
			Logger: log.With().Str("component", "console").Logger(), IdleTimeout: cfg.ConsoleIdleTimeout,
			TrustProxy: cfg.ConsoleTrustProxy, RiverUI: ui != nil}),
	}), tracerProvider())
	return svc, nil
}

// startSim runs the simulated gateways on loopback with a pool of their
// own: they stand for another company, and must not queue for connections
// behind rebill's workers (a slow answer would look like a lost one).
// soleWriter: nothing else changes their fault switches (a benchmark's
// own database), so they may cache them; dev mode's nodes share theirs.
// devClock: they stamp operations with the dev clock, read through their
// own pool (the nodes' clock pool is kept for the nodes' transactions), so
// a day reached by moving it has its operations; otherwise real time.
func startSim(ctx context.Context, pool *pgxpool.Pool, maxConns int32, names []string, soleWriter, devClock bool, log zerolog.Logger) (string, func(), error) {
	cfg := pool.Config().Copy()
	cfg.MaxConns = maxConns
	// The simulated provider's ledger need not survive a crash of the
	// database server itself, only of rebill; skipping the WAL flush on its
	// commits keeps it from competing with rebill's own durable commits.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	simPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return "", nil, fmt.Errorf("open simulator pool: %w", err)
	}
	start := sim.Start
	switch {
	case devClock:
		manual, err := clock.NewManual(ctx, simPool, time.Now())
		if err != nil {
			simPool.Close()
			return "", nil, err
		}
		start = func(ctx context.Context, pool *pgxpool.Pool, names []string, log zerolog.Logger) (string, func(context.Context) error, error) {
			return sim.StartOnClock(ctx, pool, manual, names, log)
		}
	case soleWriter:
		start = sim.StartSoleWriter
	}
	baseURL, stop, err := start(ctx, simPool, names, log)
	if err != nil {
		simPool.Close()
		return "", nil, err
	}
	return baseURL, func() {
		_ = stop(context.Background())
		simPool.Close()
	}, nil
}

// withMaxConns copies a pool's settings with another size. The dev clock
// gets a pool of its own: code inside a transaction reads the clock, and
// taking that second connection from the same pool would deadlock once
// every connection is held by such a transaction.
func withMaxConns(cfg *pgxpool.Config, maxConns int32) *pgxpool.Config {
	c := cfg.Copy()
	c.MaxConns = maxConns
	c.MinConns = 0
	return c
}

// periodicJobs are enqueued by River's leader only. A zero scan interval
// (the benchmark, which scans by hand) leaves the billing scan out.
func periodicJobs(cfg config.Config) []*river.PeriodicJob {
	jobs := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(10*time.Minute),
			func() (river.JobArgs, *river.InsertOpts) { return idempotency.CleanupArgs{}, nil },
			&river.PeriodicJobOpts{ID: "idempotency_cleanup", RunOnStart: true}),
		resealJob(),
	}
	if cfg.ScanInterval > 0 {
		jobs = append(jobs, river.NewPeriodicJob(river.PeriodicInterval(cfg.ScanInterval),
			func() (river.JobArgs, *river.InsertOpts) { return scheduler.ScanArgs{}, nil },
			&river.PeriodicJobOpts{ID: "billing_scan", RunOnStart: true}))
	}
	return jobs
}
