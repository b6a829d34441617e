package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/internal/bench"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/config"
	"github.com/rebill/rebill/internal/pgembed"
	"github.com/rebill/rebill/internal/secrets"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/vault"
)

// benchCommand runs `rebill bench`: see package bench. Without DATABASE_URL
// it uses the server on 127.0.0.1:5432.
func benchCommand(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "Usage: rebill bench [flags]\n\n"+
		"Measures River's bare throughput and billing end to end in database rebill_bench\n"+
		"(created and dropped) on DATABASE_URL's server, or on 127.0.0.1:5432.")
	n := fs.Int("n", 20_000, "subscriptions due at the same moment")
	noop := fs.Int("noop", 100_000, "no-op jobs for River's bare throughput")
	workers := fs.Int("workers", 0, "charge workers (0: REBILL_WORKERS, by default sized by Little's law)")
	conns := fs.Int("conns", cfg.DBMaxConns, "connections of the service's pool (REBILL_DB_MAX_CONNS)")
	latency := fs.Duration("latency", 0, "latency the simulated gateway adds to every call")
	simLedger := fs.String("sim-ledger", "postgres", "where the simulated gateway keeps its ledger: postgres (its own database on the same server) or memory")
	baseline := fs.Duration("baseline", 5*time.Second, "single-row INSERT baselines from 32 clients, pgbench's (the ratios use it) and Go's, each for this long (0: skip)")
	private := fs.Bool("private", false, "run on a private PostgreSQL (this machine's binaries, a temporary folder) that preloads pg_stat_statements, to count statements per charge")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	scanOnly := fs.Bool("scan-only", false, "measure the scan and stop (for very large -n)")
	scanBatch := fs.Int("scan-batch", 1000, "subscriptions per scan transaction")
	database := fs.String("db", "rebill_bench", "database to create (dropped first) on the server")
	history := fs.String("history", "", "rows written before measuring, as years of use would leave them: big (2,000,000 subscriptions, 10,000,000 charges, 20,000,000 events: about 15 GB) or SUBSCRIPTIONS,CHARGES,EVENTS")
	template := fs.String("template", "", "start from a copy of this database (say one filled by -history big -n 0 -db rebill_history) instead of an empty one")
	webhook := fs.Bool("webhook", false, "one webhook endpoint subscribed to every event, on a local receiver")
	if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
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
	if *private {
		dir, err := os.MkdirTemp("", "rebill-bench-pg-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(dir, "pg"), Log: stderr,
			Settings: []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_utility=off"}})
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
	past, err := bench.ParseHistory(*history)
	if err != nil {
		return fmt.Errorf("-history: %w", err)
	}
	return bench.Run(ctx, bench.Options{
		ServerURL: server, Database: *database, Subscriptions: *n, NoopJobs: *noop, Workers: cfg.Workers, Conns: *conns,
		Baseline: *baseline, History: past, Template: *template, Out: stdout, Log: log,
		Billing: func(ctx context.Context, pool *pgxpool.Pool, n int) (bench.BillingResult, error) {
			cfg.ScanBatch = *scanBatch
			return benchBilling(ctx, cfg, server, *database, pool, n, billingOptions{latency: *latency,
				memoryLedger: *simLedger == "memory", scanOnly: *scanOnly, webhook: *webhook}, log)
		},
	})
}

// benchBilling bills n subscriptions due at one instant through a
// production-mode node (wall clock) and a simulated gateway over loopback
// HTTP, started beside it as `rebill gatewaysim` would be, with its ledger
// in a database of its own so that rebill's statements can be told apart.
func benchBilling(ctx context.Context, cfg config.Config, server, database string, pool *pgxpool.Pool, n int,
	o billingOptions, log zerolog.Logger) (bench.BillingResult, error) {
	quiet := log.Level(zerolog.ErrorLevel)
	baseURL, stopSim, err := benchSim(ctx, server, database, o.memoryLedger, quiet)
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

	cfg.Dev = false
	cfg.Gateways = config.DevGateways(baseURL)[:1]
	cfg.ScanInterval = 0 // the timed scan below is the only one
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
	svc, err := Build(ctx, cfg, pool, quiet)
	if err != nil {
		return bench.BillingResult{}, err
	}
	defer svc.Close()

	due := time.Now()
	if err := bench.InsertSubscriptions(ctx, pool, n, due); err != nil {
		return bench.BillingResult{}, err
	}
	// The seeded rows hold their token in clear: seal it now, not in the
	// secrets_reseal job that River's start would run during the timing.
	if _, err := vault.RunSteps(ctx, svc.reseal, resealBatch); err != nil {
		return bench.BillingResult{}, err
	}

	// The scan runs first on its own, so that its rate is the scan's and
	// not a share of two cores it contends for with the workers; the
	// end-to-end time counts from the scan's start all the same.
	start := time.Now()
	scan, err := svc.Renewals.Scan(ctx, svc.Clock.Now())
	if err != nil {
		return bench.BillingResult{}, err
	}
	scanned := time.Since(start)
	if scan.Enqueued != n {
		return bench.BillingResult{}, fmt.Errorf("scan enqueued %d charges, want %d", scan.Enqueued, n)
	}
	if scanOnly {
		return bench.BillingResult{ScanDuration: scanned, Charges: n}, nil
	}
	if err := svc.River.Start(ctx); err != nil {
		return bench.BillingResult{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
	}()
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
	end, err := charges.LastSettled(ctx, pool)
	if err != nil {
		return bench.BillingResult{}, err
	}
	res := bench.BillingResult{ScanDuration: scanned, EndToEnd: end.Sub(start), Charges: n}
	succeeded, err := charges.CountByStatus(ctx, pool, charges.Succeeded)
	if err != nil {
		return res, err
	}
	if succeeded != int64(n) {
		return res, fmt.Errorf("%d of %d charges succeeded once none was in flight", succeeded, n)
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

// billingOptions are the billing part's flags.
type billingOptions struct {
	latency      time.Duration // added by the simulated gateway to every call
	memoryLedger bool          // the simulator keeps its ledger in memory
	scanOnly     bool
	webhook      bool
}

// benchSim starts the simulated gateway sim1 with its ledger in a database
// of its own beside the bench's, so that the bench's database counts
// rebill's work alone, or in memory.
func benchSim(ctx context.Context, server, database string, memory bool, log zerolog.Logger) (string, func(), error) {
	if memory {
		baseURL, stop, err := sim.StartInMemory(ctx, []string{"sim1"}, log)
		if err != nil {
			return "", nil, err
		}
		return baseURL, func() { _ = stop(context.Background()) }, nil
	}
	simPool, closeSimPool, err := bench.FreshDatabase(ctx, server, database+"_sim", 20)
	if err != nil {
		return "", nil, err
	}
	baseURL, stopSim, err := startSim(ctx, simPool, 20, []string{"sim1"}, true, false, log)
	if err != nil {
		closeSimPool()
		return "", nil, err
	}
	return baseURL, func() { stopSim(); closeSimPool() }, nil
}
