package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/pgembed"
)

// baselineClients matches the API benchmark's 32 clients.
const baselineClients = 32

// insertBaseline is the yardstick the targets are ratios of: what this
// database server does for the simplest durable write, an autocommitted
// single-row INSERT from 32 clients, like pgbench's insert-only script.
func insertBaseline(ctx context.Context, connString string, d time.Duration) (float64, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = baselineClients
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_baseline (id uuid PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		return 0, err
	}
	defer func() { _, _ = pool.Exec(context.WithoutCancel(ctx), `DROP TABLE bench_baseline`) }()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range baselineClients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := pool.Exec(ctx, `INSERT INTO bench_baseline (id, n) VALUES ($1, $2)`, uuid.New(), done.Load()); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(done.Load()) / d.Seconds(), nil
}

// pgbenchBaseline is insertBaseline measured by pgbench instead of Go: the
// yardstick the throughput targets are stated in (pgbench's single-row INSERT
// from 32 clients, no Go client sharing the cores). It returns pgbench's
// tps, or an error when pgbench cannot be found or run.
func pgbenchBaseline(ctx context.Context, connString string, d time.Duration) (float64, error) {
	pgbench, err := pgembed.Program(ctx, "pgbench")
	if err != nil {
		return 0, err
	}
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_pgbench (id uuid PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		return 0, err
	}
	defer func() { _, _ = pool.Exec(context.WithoutCancel(ctx), `DROP TABLE bench_pgbench`) }()
	script, err := os.CreateTemp("", "rebill-bench-*.sql")
	if err != nil {
		return 0, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString("INSERT INTO bench_pgbench (id, n) VALUES (gen_random_uuid(), 1);\n"); err != nil {
		return 0, err
	}
	if err := script.Close(); err != nil {
		return 0, err
	}
	cfg := pool.Config().ConnConfig
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", fmt.Sprint(baselineClients), "-j", "2",
		"-T", fmt.Sprint(int(d.Seconds())), "-f", script.Name(),
		"-h", cfg.Host, "-p", fmt.Sprint(cfg.Port), "-U", cfg.User, cfg.Database)
	if cfg.Password != "" {
		cmd.Env = append(os.Environ(), "PGPASSWORD="+cfg.Password)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	m := pgbenchTPS.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// pgbenchTPS is pgbench's result line.
var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+)`)

// dbStats are cumulative counters of one database.
type dbStats struct {
	Commits    int64 // transactions committed (pg_stat_database)
	Statements int64 // statements run, BEGIN/COMMIT/ROLLBACK not counted (pg_stat_statements)
	Writes     int64 // of which INSERT, UPDATE, DELETE (or a WITH that may write)
	// Updates of the charges table (pg_stat_user_tables), and how many of
	// them were heap-only (HOT): an update that changes no indexed column
	// and fits on its page touches no index.
	ChargeUpdates, ChargeHOTUpdates int64
}

// statementStatsOn reports whether pg_stat_statements can be read: the
// server must preload it (`rebill-bench -private` starts one that does).
func statementStatsOn(ctx context.Context, pool *pgxpool.Pool) bool {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	_, err := pool.Exec(ctx, `SELECT count(*) FROM pg_stat_statements`)
	return err == nil
}

// readStats reads db's counters. The simulator keeps its ledger in a
// database of its own, so these are rebill's alone (River's included).
func readStats(ctx context.Context, pool *pgxpool.Pool, db string, statements bool) (dbStats, error) {
	var s dbStats
	// pg_stat_database is updated when a backend reports, at most every
	// half second and at transaction end; a fresh snapshot is asked for.
	if _, err := pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return s, err
	}
	if err := pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&s.Commits); err != nil {
		return s, fmt.Errorf("read commits of %s: %w", db, err)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
		FROM pg_stat_user_tables WHERE relname = 'charges'`).Scan(&s.ChargeUpdates, &s.ChargeHOTUpdates); err != nil {
		return s, fmt.Errorf("read updates of charges in %s: %w", db, err)
	}
	if !statements {
		return s, nil
	}
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint,
			coalesce(sum(calls) FILTER (WHERE query ~* '^\s*(insert|update|delete|with)'), 0)::bigint
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1 AND query !~* '^\s*(begin|commit|rollback)'`, db).Scan(&s.Statements, &s.Writes)
	if err != nil {
		return s, fmt.Errorf("read statements of %s: %w", db, err)
	}
	return s, nil
}

// printTop prints the n statements of db that took the most execution
// time since the counters were reset: where the database's share of the
// run went, statement by statement.
func printTop(ctx context.Context, pool *pgxpool.Pool, db string, n int, out io.Writer) error {
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, rows, shared_blks_hit + shared_blks_read,
			left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1 ORDER BY total_exec_time DESC LIMIT $2`, db, n)
	if err != nil {
		return fmt.Errorf("read the top statements of %s: %w", db, err)
	}
	type top struct {
		calls, rows, buffers int64
		ms                   float64
		query                string
	}
	tops, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (top, error) {
		var t top
		return t, row.Scan(&t.calls, &t.ms, &t.rows, &t.buffers, &t.query)
	})
	if err != nil {
		return fmt.Errorf("read the top statements of %s: %w", db, err)
	}
	fmt.Fprintf(out, "top statements by execution time (calls, ms, rows, buffers):\n")
	for _, t := range tops {
		fmt.Fprintf(out, "  %8d %10.0f %9d %10d  %s\n", t.calls, t.ms, t.rows, t.buffers, t.query)
	}
	return nil
}
