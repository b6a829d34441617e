// Package bench measures the billing engine on this machine, in one run:
// River's bare throughput for a no-op job, then N subscriptions due at the
// same moment billed end to end through the simulated gateway.
//
// It creates (and drops first) its own database, rebill_bench, on the
// server it is given: never point it at a database whose jobs matter.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/subscriptions"
)

// Options sizes a run.
type Options struct {
	ServerURL     string // any database on the server; Database is created beside it
	Database      string // default rebill_bench
	Subscriptions int
	// Payers own the subscriptions, spread evenly (0: one payer each); a
	// payer's subscriptions share its card.
	Payers   int
	NoopJobs int
	Workers  int
	// Conns sizes each node's pool (REBILL_DB_MAX_CONNS).
	Conns int
	// Nodes bill the same subscriptions, each with its River client,
	// workers, scan loop and pool.
	Nodes int
	// Baseline runs single-row INSERTs from 32 clients for this long, as a
	// yardstick measured in the same run; zero skips it.
	Baseline time.Duration
	// History is written into the tables before anything is measured.
	History History
	// Template is a database to start from instead of an empty one (one
	// that an earlier run filled with history: a run leaves its database
	// in place, and drops it when it starts again).
	Template string
	// Top prints the statements of the run that took the most time,
	// this many (pg_stat_statements: a -private server).
	Top int
	Out io.Writer
	Log zerolog.Logger
	// Billing runs the billing part against the migrated bench database and
	// returns its figures (a zero EndToEnd: the scan alone was measured);
	// the caller wires the real service into it.
	Billing func(ctx context.Context, pool *pgxpool.Pool, n int) (BillingResult, error)
}

// BillingResult is what the billing part measured.
type BillingResult struct {
	ScanDuration time.Duration
	// ScanLoop: the nodes' scan loop scanned while they billed (several
	// nodes), not a scan timed on its own before River started.
	ScanLoop bool
	EndToEnd time.Duration
	Charges  int
	Nodes    int
	// Exactness is what was counted of every period charged exactly once.
	Exactness Exactness
	// SettledBy are the times from the scan's start by which half, 90 %
	// and 99 % of the charges had settled: a tail shows apart from the
	// rate.
	SettledBy []time.Duration
	// NodeShares are the charges each node's workers settled (several
	// nodes only).
	NodeShares []int
	// Deliveries webhook deliveries (one endpoint subscribed to every
	// event) were all received DeliveredIn after the scan started.
	Deliveries  int
	DeliveredIn time.Duration
	// SlotWaits are the snoozes of the authorize jobs: the times charges
	// waited for a declines-limit slot (or for a gateway that did nothing).
	SlotWaits int
	// BillingRSSMiB is the process's peak RSS when the last charge
	// settled: the nodes' (and the in-process simulator's), before the
	// exactly-once check reads every charge and ledger entry.
	BillingRSSMiB float64
}

// PeakRSSMiB is this process's peak resident set so far, in MiB.
func PeakRSSMiB() float64 { return peakRSSMiB() }

// Exactness counts, once no charge is in flight, what must hold for
// every due period to have been charged exactly once.
type Exactness struct {
	Charges, Succeeded int64 // rebill's charges, and those succeeded
	// DuplicatePeriods are (subscription, period) pairs with more than one
	// charge; Uncharged are subscriptions with none.
	DuplicatePeriods, Uncharged int64
	// Captures are the succeeded captures in the simulator's ledger;
	// Uncaptured charges have none, CapturedTwice more than one, and
	// UnknownCaptures are for no charge of rebill's.
	Captures, Uncaptured, CapturedTwice, UnknownCaptures int64
	// Unsettled lists the charges not succeeded by status ("requires_review
	// 3"): a charge in review is a step that timed out, not a double
	// charge, but its period is not known to be charged once either.
	Unsettled string
}

// Holds reports whether n periods were each charged exactly once.
func (e Exactness) Holds(n int) bool {
	want := int64(n)
	return e.Charges == want && e.Succeeded == want && e.DuplicatePeriods == 0 && e.Uncharged == 0 &&
		e.Captures == want && e.Uncaptured == 0 && e.CapturedTwice == 0 && e.UnknownCaptures == 0
}

func (e Exactness) String() string {
	unsettled := ""
	if e.Unsettled != "" {
		unsettled = " (not succeeded: " + e.Unsettled + ")"
	}
	return fmt.Sprintf("%d charges (%d succeeded), %d periods charged twice, %d subscriptions uncharged; "+
		"%d succeeded captures at the gateway, %d charges uncaptured, %d captured twice, %d captures of no charge",
		e.Charges, e.Succeeded, e.DuplicatePeriods, e.Uncharged, e.Captures, e.Uncaptured, e.CapturedTwice, e.UnknownCaptures) + unsettled
}

// Run performs both measurements and prints the figures.
func Run(ctx context.Context, o Options) error {
	if o.Database == "" {
		o.Database = "rebill_bench"
	}
	pool, drop, err := copyDatabase(ctx, o.ServerURL, o.Database, o.Template, o.Conns)
	if err != nil {
		return err
	}
	defer drop()
	if o.Nodes < 1 {
		o.Nodes = 1
	}
	nodes := ""
	if o.Nodes > 1 {
		nodes = fmt.Sprintf("%d nodes, each ", o.Nodes)
	}
	payers := ""
	if o.Payers > 0 {
		payers = fmt.Sprintf(" of %d payers", o.Payers)
	}
	fmt.Fprintf(o.Out, "rebill-bench: %d subscriptions%s, %d no-op jobs, %s%d workers, %d connections, GOMAXPROCS %d\n",
		o.Subscriptions, payers, o.NoopJobs, nodes, o.Workers, o.Conns, runtime.GOMAXPROCS(0))
	server, err := serverSettings(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "server:                  %s\n", server)
	if o.History != (History{}) {
		if err := Fill(ctx, pool, o.History, time.Now(), o.Out); err != nil {
			return err
		}
	}
	if o.Subscriptions == 0 {
		return nil
	}

	var baseline float64
	if o.Baseline > 0 {
		if baseline, err = insertBaseline(ctx, pool.Config().ConnString(), o.Baseline); err != nil {
			return fmt.Errorf("insert baseline: %w", err)
		}
		fmt.Fprintf(o.Out, "baseline single-row INSERT: %5.0f tps (Go, %d clients, %s)\n", baseline, baselineClients, o.Baseline)
		// pgbench's figure, when pgbench is here, is the one the ratios
		// use: no Go client shares the cores with the server.
		if tps, err := pgbenchBaseline(ctx, pool.Config().ConnString(), o.Baseline); err != nil {
			fmt.Fprintf(o.Out, "baseline with pgbench:      not measured: %v\n", err)
		} else {
			baseline = tps
			fmt.Fprintf(o.Out, "baseline with pgbench:      %5.0f tps (%d clients, %s; the ratios use it)\n", tps, baselineClients, o.Baseline)
		}
	}

	noopRate, err := riverNoop(ctx, pool, o.NoopJobs, o.Workers)
	if err != nil {
		return fmt.Errorf("river no-op bench: %w", err)
	}
	fmt.Fprintf(o.Out, "river bare throughput:   %8.0f jobs/s (%d no-op jobs)\n", noopRate, o.NoopJobs)
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}

	counted := statementStatsOn(ctx, pool)
	if counted && o.Top > 0 {
		if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return fmt.Errorf("reset pg_stat_statements: %w", err)
		}
	}
	before, err := readStats(ctx, pool, o.Database, counted)
	if err != nil {
		return err
	}
	res, err := o.Billing(ctx, pool, o.Subscriptions)
	if err != nil {
		if res.Exactness.Charges > 0 {
			fmt.Fprintf(o.Out, "exactly once:            NO: %s\n", res.Exactness)
		}
		return fmt.Errorf("billing bench: %w", err)
	}
	after, err := readStats(ctx, pool, o.Database, counted)
	if err != nil {
		return err
	}
	if counted && o.Top > 0 {
		if err := printTop(ctx, pool, o.Database, o.Top, o.Out); err != nil {
			return err
		}
	}
	how := ""
	if res.ScanLoop {
		how = "; the nodes' scan loop, one billing_scan job, while they billed"
	}
	fmt.Fprintf(o.Out, "scan rate:               %8.0f periods/s (%d periods enqueued in %s%s)\n",
		float64(res.Charges)/res.ScanDuration.Seconds(), res.Charges, res.ScanDuration.Round(time.Millisecond), how)
	if res.EndToEnd == 0 {
		fmt.Fprintf(o.Out, "peak RSS:                %8.1f MiB (scan only)\n", peakRSSMiB())
		return nil
	}
	endToEnd := float64(res.Charges) / res.EndToEnd.Seconds()
	across := ""
	if o.Nodes > 1 {
		across = fmt.Sprintf(", %d nodes together", o.Nodes)
	}
	fmt.Fprintf(o.Out, "charges end to end:      %8.0f charges/s (%d succeeded in %s from the scan's start; authorize + capture each%s)\n",
		endToEnd, res.Charges, res.EndToEnd.Round(time.Millisecond), across)
	if len(res.SettledBy) == 3 {
		fmt.Fprintf(o.Out, "settled by:              50 %% %s, 90 %% %s, 99 %% %s, all %s (from the scan's start)\n",
			res.SettledBy[0].Round(time.Millisecond), res.SettledBy[1].Round(time.Millisecond),
			res.SettledBy[2].Round(time.Millisecond), res.EndToEnd.Round(time.Millisecond))
	}
	e := res.Exactness
	if !e.Holds(res.Charges) {
		fmt.Fprintf(o.Out, "exactly once:            NO: %s\n", e)
		return fmt.Errorf("billing bench: not every period was charged exactly once: %s", e)
	}
	fmt.Fprintf(o.Out, "exactly once:            yes (%d periods, %d charges, %d succeeded captures at the gateway, one per charge)\n",
		res.Charges, e.Charges, e.Captures)
	if o.Payers > 0 {
		fmt.Fprintf(o.Out, "authorize snoozes:       %8d (waits for a declines-limit slot, or for a gateway that did nothing)\n", res.SlotWaits)
	}
	if len(res.NodeShares) > 0 {
		parts := make([]string, len(res.NodeShares))
		for i, c := range res.NodeShares {
			parts[i] = fmt.Sprintf("node %d %d (%.1f %%)", i+1, c, 100*float64(c)/float64(res.Charges))
		}
		fmt.Fprintf(o.Out, "charges per node:        %s (whose worker ran the charge's last job)\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(o.Out, "ratio to River bare:     %8.3f (charges/s over no-op jobs/s)\n", endToEnd/noopRate)
	if baseline > 0 {
		fmt.Fprintf(o.Out, "ratio to baseline:       %8.3f (charges/s over single-row INSERT tps)\n", endToEnd/baseline)
	}
	n := float64(res.Charges)
	fmt.Fprintf(o.Out, "commits per charge:      %8.2f (rebill's database; the simulator has its own)\n",
		float64(after.Commits-before.Commits)/n)
	if upd := after.ChargeUpdates - before.ChargeUpdates; upd > 0 {
		hot := after.ChargeHOTUpdates - before.ChargeHOTUpdates
		fmt.Fprintf(o.Out, "charges updates HOT:     %8.1f %% (%d of %d updates heap-only; %.2f updates per charge)\n",
			100*float64(hot)/float64(upd), hot, upd, float64(upd)/n)
	}
	if counted {
		fmt.Fprintf(o.Out, "statements per charge:   %8.2f (%.2f of them INSERT/UPDATE/DELETE; BEGIN/COMMIT not counted)\n",
			float64(after.Statements-before.Statements)/n, float64(after.Writes-before.Writes)/n)
	}
	if res.Deliveries > 0 {
		fmt.Fprintf(o.Out, "webhook deliveries:      %8.0f deliveries/s (%d received in %s from the scan's start)\n",
			float64(res.Deliveries)/res.DeliveredIn.Seconds(), res.Deliveries, res.DeliveredIn.Round(time.Millisecond))
	}
	fmt.Fprintf(o.Out, "peak RSS:                %8.1f MiB (%.1f MiB when the last charge settled, before the exactly-once check)\n",
		peakRSSMiB(), res.BillingRSSMiB)
	return nil
}

// FreshDatabase drops and creates the database name on the server and
// migrates it; its pool has conns connections.
func FreshDatabase(ctx context.Context, serverURL, name string, conns int) (*pgxpool.Pool, func(), error) {
	return copyDatabase(ctx, serverURL, name, "", conns)
}

// copyDatabase is FreshDatabase starting from a copy of template (none:
// empty). The copy is taken file by file: a template with years of history
// is gigabytes, which the default strategy would push through the WAL.
func copyDatabase(ctx context.Context, serverURL, name, template string, conns int) (*pgxpool.Pool, func(), error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	create := `CREATE DATABASE ` + ident
	if template != "" {
		create += ` TEMPLATE ` + pgx.Identifier{template}.Sanitize() + ` STRATEGY FILE_COPY`
	}
	for _, stmt := range []string{`DROP DATABASE IF EXISTS ` + ident + ` WITH (FORCE)`, create} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, nil, err
	}
	u.Path = "/" + name
	q := u.Query()
	q.Set("pool_max_conns", fmt.Sprint(conns))
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, nil, err
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// riverNoop inserts n no-op jobs in batches, then times a client working
// them off (RIVER.md's bench tuning: 2ms fetch cooldown, 20ms poll).
func riverNoop(ctx context.Context, pool *pgxpool.Pool, n, workers int) (float64, error) {
	var done atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	})
	if err != nil {
		return 0, err
	}
	for inserted := 0; inserted < n; {
		batch := make([]river.InsertManyParams, min(5000, n-inserted))
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertManyFast(ctx, batch); err != nil {
			return 0, err
		}
		inserted += len(batch)
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	// Time from the first completed job, so that start-up (leader
	// election, the first fetch) does not count as work.
	for done.Load() == 0 {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	first := done.Load()
	for done.Load() < int64(n) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return 0, err
	}
	return float64(int64(n)-first) / elapsed.Seconds(), nil
}

// RunCustomerPrefix starts the customer id of every subscription a run
// bills (history's are hist-).
const RunCustomerPrefix = "bench-"

// InsertSubscriptions writes n active monthly subscriptions whose first
// period starts at anchor, in batches, straight into the table: the API is
// measured elsewhere, and the billing figures should not wait on it. They
// belong to payers customers in turn (0: one customer each), all on the
// same card.
func InsertSubscriptions(ctx context.Context, pool *pgxpool.Pool, n, payers int, anchor time.Time) error {
	const batch = 10_000
	for done := 0; done < n; done += batch {
		size := min(batch, n-done)
		ids := make([]uuid.UUID, size)
		customers := make([]string, size)
		for i := range ids {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			ids[i] = id
			customer := done + i
			if payers > 0 {
				customer %= payers
			}
			customers[i] = fmt.Sprintf("%s%d", RunCustomerPrefix, customer)
		}
		_, err := pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
				interval_count, timezone, billing_anchor, next_period_index, next_charge_at, pm_gateway, pm_token,
				pm_exp_month, pm_exp_year, created_at, updated_at)
			SELECT id, cust, $4, 1990, 'USD', 'month', 1, 'UTC', $3, 0, $3, 'sim1', 'tok_ok_bench', 12, 2035, $3, $3
			FROM unnest($1::uuid[], $2::text[]) AS t(id, cust)`, ids, customers, anchor, subscriptions.Active)
		if err != nil {
			return fmt.Errorf("insert subscriptions: %w", err)
		}
	}
	return nil
}

func peakRSSMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// serverSettings names the server's settings that change what a run
// measures: without autovacuum the dead rows a million charges leave stay
// in the tables and their indexes, and a run measures that, not rebill.
func serverSettings(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var out string
	if err := pool.QueryRow(ctx, `SELECT string_agg(name || ' ' || current_setting(name), ', ' ORDER BY name)
		FROM unnest(ARRAY['autovacuum', 'shared_buffers', 'max_wal_size', 'synchronous_commit']) AS name`).Scan(&out); err != nil {
		return "", fmt.Errorf("read the server's settings: %w", err)
	}
	return out, nil
}
