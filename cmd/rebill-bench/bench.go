package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/bench"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/renewals"
)

// benchCommand runs rebill-bench: see package bench. Without DATABASE_URL
// it uses the server on 127.0.0.1:5432.
func benchCommand(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := app.NewFlagSet("rebill-bench", "Usage: rebill-bench [flags]\n\n"+
		"Measures River's bare throughput and billing end to end in database rebill_bench\n"+
		"(created and dropped) on DATABASE_URL's server, or on 127.0.0.1:5432.")
	n := fs.Int("n", 20_000, "subscriptions due at the same moment")
	payers := fs.Int("payers", 0, "payers the subscriptions belong to, in turn, all on one card (0: one payer each); -payers 1 is one payer with all of them due at once")
	noop := fs.Int("noop", 100_000, "no-op jobs for River's bare throughput")
	workers := fs.Int("workers", 0, "charge workers (0: REBILL_WORKERS, by default sized by Little's law)")
	conns := fs.Int("conns", cfg.DBMaxConns, "connections of the service's pool (REBILL_DB_MAX_CONNS)")
	latency := fs.Duration("latency", 0, "latency the simulated gateway adds to every call")
	simLedger := fs.String("sim-ledger", "postgres", "where the simulated gateway keeps its ledger: postgres (its own database on the same server) or memory")
	baseline := fs.Duration("baseline", 5*time.Second, "single-row INSERT baselines from 32 clients, pgbench's (the ratios use it) and Go's, each for this long (0: skip)")
	private := fs.Bool("private", false, "run on a private PostgreSQL (this machine's binaries, a temporary folder) that preloads pg_stat_statements, to count statements per charge")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file once every charge has settled, the nodes still up")
	scanOnly := fs.Bool("scan-only", false, "measure the scan and stop (for very large -n)")
	scanBatch := fs.Int("scan-batch", 1000, "subscriptions per scan transaction")
	database := fs.String("db", "rebill_bench", "database to create (dropped first) on the server")
	history := fs.String("history", "", "rows written before measuring, as years of use would leave them: big (2,000,000 subscriptions, 10,000,000 charges, 20,000,000 events: about 15 GB) or SUBSCRIPTIONS,CHARGES,EVENTS")
	template := fs.String("template", "", "start from a copy of this database (say one filled by -history big -n 0 -db rebill_history) instead of an empty one")
	webhook := fs.Bool("webhook", false, "one webhook endpoint subscribed to every event, on a local receiver")
	var pgSettings []string
	fs.Func("pg", "a server setting NAME=VALUE for the private PostgreSQL (with -private; repeatable), e.g. -pg shared_buffers=4GB to size its buffer pool to the run's tables",
		func(v string) error {
			if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
				return fmt.Errorf("%q: want NAME=VALUE", v)
			}
			pgSettings = append(pgSettings, v)
			return nil
		})
	top := fs.Int("top", 0, "print this many statements that took the most of the database's time (with -private)")
	nodes := fs.Int("nodes", 1, "production-mode nodes billing the same subscriptions, each with its River client, workers, scan loop and pool of -conns; with more than one, the nodes' own scan loop scans (one billing_scan job, while the workers bill)")
	if done, err := app.ParseFlags(fs, args, stdout, stderr); done || err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	server := cfg.DatabaseURL
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if len(pgSettings) > 0 && !*private {
		return errors.New("-pg sets the private PostgreSQL's settings: add -private")
	}
	if *private {
		dir, err := os.MkdirTemp("", "rebill-bench-pg-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(dir, "pg"), Log: stderr,
			Settings: append([]string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_utility=off"}, pgSettings...)})
		if err != nil {
			return err
		}
		defer func() {
			_ = cluster.Stop(context.WithoutCancel(ctx))
			_ = os.RemoveAll(cluster.DataDir())
		}()
		server = cluster.URL("postgres")
	}
	if *simLedger != "postgres" && *simLedger != "memory" {
		return fmt.Errorf("-sim-ledger %q: want postgres or memory", *simLedger)
	}
	if *workers > 0 {
		cfg.Workers = *workers
	}
	if *nodes < 1 {
		return fmt.Errorf("-nodes %d: want at least 1", *nodes)
	}
	if *nodes > 1 && *scanOnly {
		return errors.New("-scan-only times one scan on its own: not with -nodes")
	}
	past, err := bench.ParseHistory(*history)
	if err != nil {
		return fmt.Errorf("-history: %w", err)
	}
	return bench.Run(ctx, bench.Options{
		ServerURL: server, Database: *database, Subscriptions: *n, NoopJobs: *noop, Workers: cfg.Workers, Conns: *conns,
		Baseline: *baseline, History: past, Template: *template, Out: stdout, Log: log, Nodes: *nodes, Payers: *payers,
		Top: *top,
		Billing: func(ctx context.Context, pool *pgxpool.Pool, n int) (bench.BillingResult, error) {
			cfg.ScanBatch = *scanBatch
			return benchBilling(ctx, cfg, server, *database, pool, n, billingOptions{latency: *latency,
				memoryLedger: *simLedger == "memory", scanOnly: *scanOnly, memProfile: *memProfile, webhook: *webhook, nodes: *nodes, payers: *payers}, log)
		},
	})
}

// benchBilling bills n subscriptions due at one instant through
// production-mode nodes (wall clock) and a simulated gateway over loopback
// HTTP, started beside them as `rebill gatewaysim` would be, with its ledger
// in a database of its own so that rebill's statements can be told apart,
// or in memory. Every node has its own pool, River client and workers on
// the one bench database. Once none is in flight, every period must have
// been charged exactly once, in rebill's books and in the gateway's.
func benchBilling(ctx context.Context, cfg config.Config, server, database string, pool *pgxpool.Pool, n int,
	o billingOptions, log zerolog.Logger) (bench.BillingResult, error) {
	quiet := log.Level(zerolog.ErrorLevel)
	baseURL, books, stopSim, err := benchSim(ctx, server, database, o.memoryLedger, quiet)
	if err != nil {
		return bench.BillingResult{}, err
	}
	defer stopSim()
	if o.latency > 0 {
		ms := int(o.latency.Milliseconds())
		if _, err := sim.NewClient("sim1", baseURL+"/sim1", sim.ClientOptions{}).SetFaults(ctx, sim.FaultsPatch{LatencyMS: &ms}); err != nil {
			return bench.BillingResult{}, err
		}
	}
	scanOnly, webhook := o.scanOnly, o.webhook
	// One node scans by hand, timed on its own; several scan as they
	// would in production: the leader's scan loop enqueues one
	// billing_scan job on start (then none for an hour), which a node
	// runs while every node's workers bill what it has enqueued so far.
	scanLoop := o.nodes > 1

	cfg.Dev = false
	cfg.Gateways = config.DevGateways(baseURL)[:1]
	cfg.ScanInterval = 0 // the timed scan below is the only one
	if scanLoop {
		cfg.ScanInterval = time.Hour
	}
	cfg.GatewayTimeout = 10 * time.Second
	cfg.RescueAfter = time.Minute
	cfg.RetryBase, cfg.RetryMax = 100*time.Millisecond, time.Second
	if cfg.EncryptionKey == nil { // the bench database is thrown away
		if cfg.EncryptionKey, err = secrets.ParseKey(secrets.NewKey()); err != nil {
			return bench.BillingResult{}, err
		}
	}
	var received atomic.Int64
	if webhook {
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			received.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		defer receiver.Close()
		cfg.WebhookAllowPrivate = true
		keys, err := secrets.NewKeyring(cfg.EncryptionKey)
		if err != nil {
			return bench.BillingResult{}, err
		}
		hooks := &notify.Webhooks{Pool: pool, Keys: keys, Policy: notify.URLPolicy{AllowPrivate: true}, Clock: clock.Wall{}}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := hooks.Create(ctx, tx, receiver.URL, []string{"*"}, "bench")
			return err
		}); err != nil {
			return bench.BillingResult{}, err
		}
	}
	nodes := make([]*app.Service, o.nodes)
	for i := range nodes {
		nodePool := pool
		if i > 0 { // a pool of its own, as another process would have
			if nodePool, err = pgxpool.NewWithConfig(ctx, pool.Config().Copy()); err != nil {
				return bench.BillingResult{}, fmt.Errorf("open node %d's pool: %w", i+1, err)
			}
			defer nodePool.Close()
		}
		if nodes[i], err = app.Build(ctx, cfg, nodePool, quiet); err != nil {
			return bench.BillingResult{}, fmt.Errorf("build node %d: %w", i+1, err)
		}
		defer nodes[i].Close()
	}
	svc := nodes[0]

	due := time.Now()
	if err := bench.InsertSubscriptions(ctx, pool, n, o.payers, due); err != nil {
		return bench.BillingResult{}, err
	}
	// The seeded rows hold their token in clear: seal it now, not in the
	// secrets_reseal job that River's start would run during the timing.
	if err := svc.SealSecrets(ctx); err != nil {
		return bench.BillingResult{}, err
	}

	res := bench.BillingResult{Charges: n, Nodes: o.nodes}
	start := time.Now()
	if !scanLoop {
		// The scan runs first on its own, so that its rate is the scan's
		// and not a share of two cores it contends for with the workers;
		// the end-to-end time counts from the scan's start all the same.
		scan, err := svc.Renewals.Scan(ctx, svc.Clock.Now())
		if err != nil {
			return bench.BillingResult{}, err
		}
		res.ScanDuration = time.Since(start)
		if scan.Enqueued != n {
			return bench.BillingResult{}, fmt.Errorf("scan enqueued %d charges, want %d", scan.Enqueued, n)
		}
		if scanOnly {
			return res, nil
		}
	}
	for i, node := range nodes {
		if err := node.River.Start(ctx); err != nil {
			return bench.BillingResult{}, fmt.Errorf("start node %d: %w", i+1, err)
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = node.River.Stop(stopCtx)
		}()
	}
	if scanLoop {
		ran, err := waitScanJob(ctx, pool)
		if err != nil {
			return bench.BillingResult{}, err
		}
		start, res.ScanDuration, res.ScanLoop = ran.started, ran.finished.Sub(ran.started), true
	}
	// Waiting looks for one charge in flight, not at all the charges (at a
	// million, a count every poll would be a load of its own); the end is
	// when the last charge settled, read once they all have.
	for {
		inFlight, err := charges.AnyInFlight(ctx, pool)
		if err != nil {
			return bench.BillingResult{}, err
		}
		if !inFlight {
			break
		}
		if ctx.Err() != nil {
			return bench.BillingResult{}, ctx.Err()
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.BillingRSSMiB = bench.PeakRSSMiB()
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			return bench.BillingResult{}, err
		}
	}
	end, err := charges.LastSettled(ctx, pool)
	if err != nil {
		return bench.BillingResult{}, err
	}
	res.EndToEnd = end.Sub(start)
	var settled []time.Time
	if err := pool.QueryRow(ctx, `SELECT percentile_disc(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY updated_at)
		FROM charges WHERE status = $1 AND `+runCharges, string(charges.Succeeded)).Scan(&settled); err != nil {
		return res, fmt.Errorf("read when charges settled: %w", err)
	}
	for _, at := range settled {
		res.SettledBy = append(res.SettledBy, at.Sub(start))
	}
	waits, err := charges.AuthorizeSnoozes(ctx, pool)
	if err != nil {
		return res, err
	}
	res.SlotWaits = int(waits)
	exact, err := checkExactlyOnce(ctx, pool, books, n)
	if err != nil {
		return res, err
	}
	res.Exactness = exact
	if !exact.Holds(n) {
		return res, fmt.Errorf("not exactly once: %s", exact)
	}
	if o.nodes > 1 {
		if res.NodeShares, err = nodeShares(ctx, pool, nodes); err != nil {
			return res, err
		}
	}
	if webhook {
		for received.Load() < int64(n) { // one charge.succeeded each
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
		res.Deliveries, res.DeliveredIn = int(received.Load()), time.Since(start)
	}
	return res, nil
}

// scanRun is when the billing_scan job ran, by the database's clock.
type scanRun struct{ started, finished time.Time }

// waitScanJob waits for the scan loop's billing_scan job to complete and
// returns when it ran; a scan that failed ends the bench.
func waitScanJob(ctx context.Context, pool *pgxpool.Pool) (scanRun, error) {
	for {
		var state rivertype.JobState
		var started, finished *time.Time
		var errs int
		err := pool.QueryRow(ctx, `SELECT state, attempted_at, finalized_at, coalesce(cardinality(errors), 0)
			FROM river_job WHERE kind = $1 ORDER BY id LIMIT 1`, renewals.ScanArgs{}.Kind()).Scan(&state, &started, &finished, &errs)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return scanRun{}, fmt.Errorf("look for the scan job: %w", err)
		case errs > 0:
			return scanRun{}, fmt.Errorf("the scan job failed (%s, %d errors)", state, errs)
		case state == rivertype.JobStateCompleted && started != nil && finished != nil:
			return scanRun{started: *started, finished: *finished}, nil
		}
		if ctx.Err() != nil {
			return scanRun{}, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runSubscriptions and runCharges pick, out of subscriptions and charges,
// the rows of this run: a database copied from a filled template holds
// years of other rows.
var (
	runSubscriptions = "customer_id LIKE '" + bench.RunCustomerPrefix + "%'"
	runCharges       = "subscription_id IN (SELECT id FROM subscriptions WHERE " + runSubscriptions + ")"
)

// checkExactlyOnce counts, once no charge is in flight, what exactly once
// means for n subscriptions due once each: in rebill's books one charge
// per (subscription, period) and no subscription without one, all
// succeeded; at the gateway one succeeded capture per charge, and none
// for a charge rebill does not have.
func checkExactlyOnce(ctx context.Context, pool *pgxpool.Pool, books sim.Books, n int) (bench.Exactness, error) {
	var e bench.Exactness
	err := pool.QueryRow(ctx, `WITH run AS (SELECT * FROM charges WHERE `+runCharges+`) SELECT
			(SELECT count(*) FROM run),
			(SELECT count(*) FROM run WHERE status = $1),
			(SELECT count(*) FROM (SELECT 1 FROM run GROUP BY subscription_id, period_key HAVING count(*) > 1) d),
			(SELECT count(*) FROM subscriptions s WHERE `+runSubscriptions+`
				AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.subscription_id = s.id))`,
		string(charges.Succeeded)).Scan(&e.Charges, &e.Succeeded, &e.DuplicatePeriods, &e.Uncharged)
	if err != nil {
		return e, fmt.Errorf("count charges per period: %w", err)
	}
	statuses, err := pool.Query(ctx, `SELECT status || ' ' || count(*) FROM charges WHERE status <> $1 AND `+runCharges+`
		GROUP BY status ORDER BY status`,
		string(charges.Succeeded))
	if err != nil {
		return e, fmt.Errorf("count unsettled charges: %w", err)
	}
	unsettled, err := pgx.CollectRows(statuses, pgx.RowTo[string])
	if err != nil {
		return e, fmt.Errorf("count unsettled charges: %w", err)
	}
	e.Unsettled = strings.Join(unsettled, ", ")
	keys := make(map[string]int, n)
	rows, err := pool.Query(ctx, `SELECT subscription_id, period_key FROM charges WHERE `+runCharges)
	if err != nil {
		return e, fmt.Errorf("read charge keys: %w", err)
	}
	for rows.Next() {
		var sub uuid.UUID
		var period string
		if err := rows.Scan(&sub, &period); err != nil {
			rows.Close()
			return e, fmt.Errorf("read charge keys: %w", err)
		}
		keys[charges.Key(sub, period)] = 0
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return e, fmt.Errorf("read charge keys: %w", err)
	}
	ledger, err := books.Ledger(ctx, "sim1")
	if err != nil {
		return e, fmt.Errorf("read the simulator's ledger: %w", err)
	}
	for _, op := range ledger {
		if op.Op != gateway.OpCapture || op.Status != gateway.StatusSucceeded {
			continue
		}
		e.Captures++
		key, _, _, ok := charges.ParseGatewayKey(op.IdempotencyKey)
		if count, known := keys[key]; !ok || !known {
			e.UnknownCaptures++
		} else {
			keys[key] = count + 1
		}
	}
	for _, count := range keys {
		switch {
		case count == 0:
			e.Uncaptured++
		case count > 1:
			e.CapturedTwice++
		}
	}
	return e, nil
}

// nodeShares counts the charges each node settled: the node whose worker
// ran the charge's last completed job (an authorize job captures inline
// unless it hands the capture to a job of its own), from River's completed
// jobs, kept for an hour. Jobs are told by the charge their args name, not
// by kind: the pipeline's job types are its own.
func nodeShares(ctx context.Context, pool *pgxpool.Pool, nodes []*app.Service) ([]int, error) {
	index := map[string]int{}
	for i, node := range nodes {
		index[node.River.ID()] = i
	}
	rows, err := pool.Query(ctx, `SELECT node, count(*) FROM (
			SELECT DISTINCT ON (args ->> 'charge_id') attempted_by[cardinality(attempted_by)] AS node FROM river_job
			WHERE args ? 'charge_id' AND state = $1 ORDER BY args ->> 'charge_id', id DESC) last
		GROUP BY node`, rivertype.JobStateCompleted)
	if err != nil {
		return nil, fmt.Errorf("count charges per node: %w", err)
	}
	defer rows.Close()
	shares := make([]int, len(nodes))
	for rows.Next() {
		var id *string
		var count int
		if err := rows.Scan(&id, &count); err != nil {
			return nil, fmt.Errorf("count charges per node: %w", err)
		}
		if id == nil {
			continue
		}
		if i, ok := index[*id]; ok {
			shares[i] += count
		}
	}
	return shares, rows.Err()
}

// billingOptions are the billing part's flags.
type billingOptions struct {
	latency      time.Duration // added by the simulated gateway to every call
	memoryLedger bool          // the simulator keeps its ledger in memory
	scanOnly     bool
	memProfile   string // heap profile once every charge has settled
	webhook      bool
	nodes        int
	payers       int // 0: one payer per subscription
}

// benchSim starts the simulated gateway sim1 with its ledger in a database
// of its own beside the bench's, so that the bench's database counts
// rebill's work alone, or in memory; books read that ledger.
func benchSim(ctx context.Context, server, database string, memory bool, log zerolog.Logger) (string, sim.Books, func(), error) {
	if memory {
		baseURL, books, stop, err := sim.StartInMemoryWithBooks(ctx, clock.Wall{}, []string{"sim1"}, log)
		if err != nil {
			return "", nil, nil, err
		}
		return baseURL, books, func() { _ = stop(context.Background()) }, nil
	}
	simPool, closeSimPool, err := bench.FreshDatabase(ctx, server, database+"_sim", 20)
	if err != nil {
		return "", nil, nil, err
	}
	baseURL, stopSim, err := app.StartSimulator(ctx, simPool, 20, []string{"sim1"}, log)
	if err != nil {
		closeSimPool()
		return "", nil, nil, err
	}
	return baseURL, sim.NewStore(simPool), func() { stopSim(); closeSimPool() }, nil
}

// writeHeapProfile writes what the heap holds after a collection: what
// the nodes keep once their work is done.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}
