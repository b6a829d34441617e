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
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/inspector"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/platform/startup"
	"github.com/rebill/rebill/platform/tracing"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
	"github.com/rebill/rebill/zhkh"
)

// Service is one rebill node over a migrated database: the HTTP handler
// and the River client (not yet started) whose workers bill.
type Service struct {
	Handler  http.Handler
	River    *river.Client[pgx.Tx]
	Renewals *renewals.Renewals
	Clock    clock.Clock
	// Inspector and Reconciler run periodically; tests call them directly.
	Inspector  *inspector.Inspector
	Reconciler *books.Reconciler
	closers    []func()
	// reseal seals every secret under the current key (job secrets_reseal).
	reseal []vault.Step
}

// Close releases what Build started besides River (the in-process
// simulated gateways and the dev clock's pool in dev mode, the replica's
// pool, River UI's caches), last opened first.
func (s *Service) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Build wires a node in four steps: dev mode's manual clock and simulated
// gateways, the billing pipeline and its workers, the River client that
// runs them, and the HTTP handler. Whatever a step opened is closed when
// a later one fails. The configured gateways are checked first (see
// checkGateways).
func Build(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log zerolog.Logger) (_ *Service, err error) {
	if err := checkGateways(ctx, cfg, log); err != nil {
		return nil, err
	}
	svc := &Service{Clock: clock.Wall{}}
	defer func() {
		if err != nil {
			svc.Close()
		}
	}()
	gatewayConfigs := slices.Clone(cfg.Gateways)
	var dev *devSetup
	if cfg.Dev {
		if dev, err = svc.startDev(ctx, cfg, pool, log); err != nil {
			return nil, err
		}
		gatewayConfigs = append(config.DevGateways(dev.simURL), gatewayConfigs...)
	}
	// Every part that enqueues jobs is given this insert-only client when
	// it is made; the working client below is made from those parts.
	jobs, err := river.NewClient(riverpgxv5.New(pool), insertConfig(cfg, log))
	if err != nil {
		return nil, fmt.Errorf("create River insert client: %w", err)
	}
	p, err := svc.buildPipeline(ctx, cfg, pool, jobs, gatewayConfigs, log)
	if err != nil {
		return nil, err
	}
	if svc.River, err = newRiver(cfg, pool, p, log); err != nil {
		return nil, err
	}
	svc.Renewals = p.renewals
	if svc.Handler, err = svc.buildHTTP(ctx, cfg, pool, p, jobs, dev, log); err != nil {
		return nil, err
	}
	return svc, nil
}

// devSetup is what dev mode adds to a node: the manual clock the API
// moves, and the root URL of the simulated gateways sim1..sim5.
type devSetup struct {
	clock  *clock.Manual
	simURL string
	// books are the simulated gateways' ledger and fault switches, for
	// the dev endpoints: in the database, or in this process's memory.
	books sim.Books
}

// startDev makes the service clock the shared manual one and starts the
// simulated gateways on loopback; both are closed with svc. Each step that
// talks to the database is retried on transient errors.
func (svc *Service) startDev(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log zerolog.Logger) (*devSetup, error) {
	_, simConns, clockConns := poolSizes(cfg)
	clockPool, err := pgxpool.NewWithConfig(ctx, withMaxConns(pool.Config(), clockConns))
	if err != nil {
		return nil, fmt.Errorf("open dev clock pool: %w", err)
	}
	svc.closers = append(svc.closers, clockPool.Close)
	var manual *clock.Manual
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "read the dev clock", func() (err error) {
		manual, err = clock.NewManual(ctx, clockPool, time.Now())
		return err
	}); err != nil {
		return nil, err
	}
	svc.Clock = manual
	simLog := log.With().Str("component", "gatewaysim").Logger()
	if cfg.SimLedger == config.SimLedgerMemory {
		return svc.startMemorySim(ctx, cfg, pool, manual, simConns, simLog, log)
	}
	var baseURL string
	var stopSim func()
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "start the simulated gateways", func() (err error) {
		baseURL, stopSim, err = startSim(ctx, pool, simConns, simNames, false, true, simLog)
		return err
	}); err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, stopSim)
	log.Warn().Msg("dev mode: manual clock, /v1/dev/* endpoints and simulated gateways sim1..sim5")
	return &devSetup{clock: manual, simURL: baseURL, books: sim.NewStore(pool)}, nil
}

// startMemorySim starts dev mode's simulated gateways with their books in
// this process (REBILL_SIM_LEDGER=memory). They stamp operations with the
// dev clock read through a pool of their own, as startSim's do; nothing
// else of theirs touches the database.
func (svc *Service) startMemorySim(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, nodeClock *clock.Manual,
	simConns int32, simLog, log zerolog.Logger) (*devSetup, error) {
	simPool, err := pgxpool.NewWithConfig(ctx, withMaxConns(pool.Config(), simConns))
	if err != nil {
		return nil, fmt.Errorf("open simulator clock pool: %w", err)
	}
	svc.closers = append(svc.closers, simPool.Close)
	var simClock *clock.Manual
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "read the dev clock for the simulated gateways", func() (err error) {
		simClock, err = clock.NewManual(ctx, simPool, time.Now())
		return err
	}); err != nil {
		return nil, err
	}
	baseURL, books, stop, err := sim.StartInMemoryWithBooks(ctx, simClock, simNames, simLog)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, func() { _ = stop(context.Background()) })
	log.Warn().Msg("dev mode: manual clock, /v1/dev/* endpoints and simulated gateways sim1..sim5, their ledger in this node's memory " +
		"(REBILL_SIM_LEDGER=memory): single node only; other nodes, rebill gatewaysim and rebill audit do not see it, and it is lost at stop")
	return &devSetup{clock: nodeClock, simURL: baseURL, books: books}, nil
}

// pipeline is the billing side of a node: the stores, the charge pipeline
// and the parts around it, and the workers that run them.
type pipeline struct {
	keys         *secrets.Keyring
	tokens       *vault.Vault
	breakers     *fleet.Gateways
	subs         *subscriptions.Store
	charges      *charges.Pipeline
	renewals     *renewals.Renewals
	bills        *autopay.Autopay
	billOutcomes autopay.Outcomes
	owners       charges.Owners
	devRegistry  api.DevRegistry
	devZhkh      api.DevZhkh
	zhkh         *zhkh.Reporter
	limiter      *velocity.Limiter
	idem         *idempotency.Store
	policy       notify.URLPolicy
	ops          ops
	retry        charges.RetryPolicy
	workers      *river.Workers
	periodic     []*river.PeriodicJob
}

// buildPipeline wires billing over the gateways, every part that enqueues
// doing so through jobs.
func (svc *Service) buildPipeline(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, jobs *river.Client[pgx.Tx],
	gatewayConfigs []config.Gateway, log zerolog.Logger) (*pipeline, error) {
	keys, err := keyring(cfg, log)
	if err != nil {
		return nil, err
	}
	tokens := &vault.Vault{Pool: pool, Keys: keys, Holders: tokenHolders()}
	exps, err := loadExperiments(cfg, gatewayConfigs)
	if err != nil {
		return nil, err
	}
	gateways, err := buildGateways(gatewayConfigs, cfg.GatewayTimeout, exps.MaxTimeout(0), svc.Clock)
	if err != nil {
		return nil, err
	}
	for i := range gateways {
		// Tokens are sealed at rest; only the gateway call opens them.
		gateways[i].Gateway = tokens.Gateway(gateways[i].Gateway)
	}
	breaker := fleet.DefaultBreaker
	breaker.OpenFor = cfg.BreakerOpenFor
	breakers := fleet.Configure(gateways, breaker)
	breakers.ReportHealth()

	// Every transition publishes its event through the recorder, in its
	// own transaction (notify).
	recorder := &notify.Recorder{Enqueue: jobs}
	subs := subscriptions.NewStore(svc.Clock)
	subs.SetEventSink(recorder)
	reports, zhkhSim, err := buildZhkh(cfg, pool, svc.Clock, jobs, log)
	if err != nil {
		return nil, err
	}
	chargeStore := &charges.Store{Events: chargeEvents(recorder, reports)}
	retry := charges.RetryPolicy{Base: cfg.RetryBase, Max: cfg.RetryMax, Now: clock.Wall{}.Now}
	poster, registrySim, err := buildRegistry(cfg, pool, svc.Clock, breakers, retry, log)
	if err != nil {
		return nil, err
	}
	warnNoRegistry(poster, log)
	chargeStore.Queue = jobs
	if poster != nil {
		poster.Charges = chargeStore
	}
	bills, billOutcomes := buildAutopay(cfg, pool, svc.Clock, recorder, log)
	bills.Charges = chargeStore
	if reports != nil {
		billOutcomes.Reports = reports
	}
	bills.Registry = poster != nil
	if poster != nil {
		bills.Postings = poster
	}
	renewer := &renewals.Renewals{Pool: pool, Subscriptions: subs, Clock: svc.Clock, Charges: chargeStore, CatchUpWindow: cfg.CatchUpWindow,
		BatchSize: cfg.ScanBatch, ScanWorkers: cfg.ScanWorkers, ScanTimeout: cfg.RescueAfter - 5*time.Second,
		ScanInterval: cfg.ScanInterval, HoldCheckRetryAfter: 10 * time.Minute,
		Logger: log.With().Str("component", "scheduler").Logger(), Experiments: exps, Dunning: cfg.DunningSchedule}
	owners := charges.Owners{Subscriptions: renewals.Outcomes{Subscriptions: subs, Renewals: renewer},
		Enrollments: billOutcomes}
	pipe := &charges.Pipeline{Pool: pool, Store: chargeStore, Gateways: breakers, Owners: owners,
		Clock: svc.Clock, Dunning: cfg.DunningSchedule, CallTimeout: cfg.GatewayTimeout, Retry: retry,
		UnavailableFor: cfg.UnavailableFor, CaptureInline: true, Logger: log.With().Str("component", "charges").Logger(),
		Tracer: tracerProvider().Tracer("github.com/rebill/rebill/charges"), Experiments: exps,
		// The hold's "about to call" reads the sealed token for the vault's
		// edge (tokens.Gateway above), which then opens it with no read.
		SealedToken: vault.SealedSQL("charges.pm_token")}
	if poster != nil {
		pipe.Postings, pipe.Outside = poster, poster
	}
	limiter := newLimiter(cfg, svc.Clock)
	declines := newDeclineLimit(cfg, limiter, pool, keys)
	pipe.Declines = declines
	renewer.Notices = &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: subs, Upcoming: cfg.UpcomingNotice,
		TrialWillEnd: cfg.TrialNotice, BatchSize: cfg.ScanBatch, Experiments: exps}
	idem := idempotency.NewStore(pool, cfg.IdempotencyLease)
	policy := notify.URLPolicy{AllowPrivate: cfg.Dev || cfg.WebhookAllowPrivate}
	ops, err := buildOps(ctx, cfg, svc, pool, gateways, poster, jobs, chargeStore, log)
	if err != nil {
		return nil, err
	}
	ops.reconciler.Paused = breakers.CircuitOpen

	workers := river.NewWorkers()
	deliver := notify.NewDeliverWorker(pool, keys, policy, cfg.WebhookRetryBase)
	deliver.PerEndpoint = max(2, cfg.WebhookWorkers/4)
	river.AddWorker(workers, deliver)
	river.AddWorker(workers, &idempotency.CleanupWorker{Store: idem, TTL: cfg.IdempotencyTTL})
	river.AddWorker(workers, &notify.RetentionWorker{Pool: pool, Clock: svc.Clock, Keep: cfg.EventsRetention})
	river.AddWorker(workers, &charges.SettledLayoutWorker{Pool: pool})
	river.AddWorker(workers, declines.sweepWorker(pool, log))
	river.AddWorker(workers, &renewals.ScanWorker{Renewals: renewer})
	svc.reseal = resealSteps(pool, tokens)
	river.AddWorker(workers, &vault.ResealWorker{Steps: svc.reseal, Batch: resealBatch})
	charges.Register(workers, pipe)
	registerAutopay(workers, bills, poster)
	ops.register(workers)
	periodic := append(append(periodicJobs(cfg), autopayPeriodicJobs(cfg, poster != nil)...), ops.periodicJobs(cfg)...)
	periodic = append(periodic, velocity.SweepJob(slotSweepInterval(cfg)))
	periodic = append(periodic, registerZhkh(workers, reports, cfg)...)
	return &pipeline{keys: keys, tokens: tokens, breakers: breakers, subs: subs, charges: pipe, renewals: renewer,
		bills: bills, billOutcomes: billOutcomes, owners: owners, devRegistry: newDevRegistry(registrySim, poster),
		devZhkh: newDevZhkh(zhkhSim), zhkh: reports, limiter: limiter, idem: idem,
		policy: policy, ops: ops, retry: retry, workers: workers, periodic: periodic}, nil
}

// insertConfig is the River configuration of inserting jobs, shared by
// the insert-only client and the working one so that a job is the same
// whichever inserts it: River applies MaxAttempts and the insert
// middleware when a job is inserted, not when it is worked.
func insertConfig(cfg config.Config, log zerolog.Logger) *river.Config {
	return &river.Config{
		MaxAttempts: cfg.ChargeMaxAttempts,
		Logger:      riverLogger(log),
		Middleware:  riverMiddleware(),
	}
}

// newRiver is the client that works p's jobs (not yet started).
func newRiver(cfg config.Config, pool *pgxpool.Pool, p *pipeline, log zerolog.Logger) (*river.Client[pgx.Tx], error) {
	jobTimeout := charges.JobTimeout(p.charges.Experiments.MaxTimeout(p.breakers.MaxTimeout(cfg.GatewayTimeout)))
	if cfg.RescueAfter <= jobTimeout+5*time.Second {
		return nil, fmt.Errorf("REBILL_RESCUE_AFTER (%s) must exceed a charge job's timeout (%s) by more than 5s", cfg.RescueAfter, jobTimeout)
	}
	rc := insertConfig(cfg, log)
	rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers},
		// Deliveries wait on other people's servers: their own bounded
		// queue, so that a slow receiver never holds up billing.
		notify.Queue: {MaxWorkers: max(1, cfg.WebhookWorkers)}}
	rc.Workers = p.workers
	rc.RetryPolicy = p.retry
	rc.JobTimeout = jobTimeout
	rc.RescueStuckJobsAfter = cfg.RescueAfter
	rc.CompletedJobRetentionPeriod = time.Hour
	rc.FetchCooldown = cfg.FetchCooldown
	rc.FetchPollInterval = cfg.FetchPollInterval
	rc.PeriodicJobs = p.periodic
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, fmt.Errorf("create River client: %w", err)
	}
	return client, nil
}

// buildHTTP is the node's handler over p: the API, dev mode's endpoints,
// River UI over svc.River and the support console.
func (svc *Service) buildHTTP(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, p *pipeline, jobs *river.Client[pgx.Tx],
	dev *devSetup, log zerolog.Logger) (http.Handler, error) {
	var devAPI *api.Dev
	if dev != nil {
		devAPI = &api.Dev{Clock: dev.clock, Gateways: dev.books, Registry: p.devRegistry, Zhkh: p.devZhkh,
			BillSources: devBillSources(p.bills, jobs, log),
			ClockMoved: func(ctx context.Context) {
				if _, err := jobs.Insert(ctx, renewals.ScanArgs{}, nil); err != nil {
					log.Error().Err(err).Msg("enqueue scan after clock move")
				}
				billsMoved(ctx, jobs, log)
				// A move past a day's end plus books.Settle makes
				// that day due: its check need not wait for the hourly
				// tick, which runs on real time.
				if _, err := jobs.Insert(ctx, books.TickArgs{}, nil); err != nil {
					log.Error().Err(err).Msg("enqueue reconciliation catch-up after clock move")
				}
			}}
	}
	ui, stopUI, err := startRiverUI(ctx, svc.River, log)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, stopUI)
	uses := &usecases.Service{Pool: pool, Subscriptions: p.subs, Renewals: p.renewals, Attempts: p.charges,
		KnownGateway: p.breakers.Known, Clock: svc.Clock, Enrollments: p.bills.Enrollments, Autopay: p.bills, Owners: p.owners,
		Velocity: p.limiter, Tokens: p.tokens, CustomerProration: subscriptions.Proration(cfg.CustomerProration)}
	metrics.ScanInterval.Set(cfg.ScanInterval.Seconds())
	zeroMetrics(p.breakers.List(), p.ops.reconciliation.registryNames(), svc.reseal)
	apiKeys := apikeys.NewStore(pool, cfg.AdminKey)
	exps := experimentsReader(pool, p.charges.Experiments, p.breakers, svc.Clock)
	return tracing.Handler(api.NewServer(api.Deps{
		Keys: apiKeys, Idempotency: p.idem, Billing: uses, Ready: pool.Ping,
		KnownGateway: p.breakers.Known, Gateways: p.breakers, Dev: devAPI, Logger: log,
		Webhooks:         &notify.Webhooks{Pool: pool, Keys: p.keys, Policy: p.policy, Clock: svc.Clock, Enqueue: jobs},
		MetricsElsewhere: cfg.MetricsAddr != "",
		Autopay:          uses, Clock: svc.Clock,
		Reconciliation: p.ops.reconciliation, Reports: p.ops.reports,
		RiverUI: ui, Experiments: exps, ExperimentSet: p.charges.Experiments, Zhkh: zhkhAPI(p.zhkh),
		Console: console.New(console.Options{Pool: pool, Keys: apiKeys, Billing: uses, Autopay: uses, Gateways: p.breakers,
			Reconciliation: p.ops.reconciliation, Reports: p.ops.reports, Experiments: exps, Clock: svc.Clock,
			Logger: log.With().Str("component", "console").Logger(), IdleTimeout: cfg.ConsoleIdleTimeout,
			TrustProxy: cfg.ConsoleTrustProxy, RiverUI: ui != nil}),
	}), tracerProvider()), nil
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
// (the benchmark, which scans by hand) leaves the billing scan out; the
// events retention runs only when REBILL_EVENTS_RETENTION is set.
func periodicJobs(cfg config.Config) []*river.PeriodicJob {
	jobs := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(10*time.Minute),
			func() (river.JobArgs, *river.InsertOpts) { return idempotency.CleanupArgs{}, nil },
			&river.PeriodicJobOpts{ID: "idempotency_cleanup", RunOnStart: true}),
		resealJob(),
	}
	if cfg.ScanInterval > 0 {
		jobs = append(jobs, river.NewPeriodicJob(river.PeriodicInterval(cfg.ScanInterval),
			func() (river.JobArgs, *river.InsertOpts) { return renewals.ScanArgs{}, nil },
			&river.PeriodicJobOpts{ID: "billing_scan", RunOnStart: true}))
	}
	// The settled charges of before settled_at existed get theirs; once
	// done, a run reads one row.
	jobs = append(jobs, charges.SettledLayoutJob())
	if cfg.EventsRetention > 0 {
		jobs = append(jobs, river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
			func() (river.JobArgs, *river.InsertOpts) { return notify.RetentionArgs{}, nil },
			&river.PeriodicJobOpts{ID: "events_retention", RunOnStart: true}))
	}
	return jobs
}
