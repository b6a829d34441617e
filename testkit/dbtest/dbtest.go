// Package dbtest gives each test its own migrated PostgreSQL database, so
// test packages run in parallel without stepping on each other.
//
// The server is TEST_DATABASE_URL when set, else the one on 127.0.0.1:5432,
// else a private cluster started from the machine's PostgreSQL binaries
// (stopped by a reaper process once no test process uses it; see
// cluster.go). Databases are cloned from a template migrated once per
// schema checksum.
//
// # Connections
//
// A stock server allows 100 connections, and the suite shares it with
// running nodes and other test runs. Each test database's pool is capped at
// [PoolConns]; tests that start nodes pass a small REBILL_DB_MAX_CONNS.
//
// # Hygiene
//
// A test's database is dropped when the test ends, failed or not. Runs that
// never reach their cleanups (killed, timed out) leave databases behind; the
// first [URL] of every test process sweeps those (see sweep.go).
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/migrations"
)

// PoolConns caps the pool [Pool] returns. Tests run two at a time per
// package and two packages at a time on a two-core machine; four
// connections per test keep a whole run near 40 even with nodes started.
const PoolConns = 4

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error

	sweepOnce sync.Once
)

// ServerURL returns a connection string for the maintenance database of the
// test server, starting the private cluster when no other server answers.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverURL, serverErr = findServer() })
	if serverErr != nil {
		tb.Fatalf("no PostgreSQL for tests: %v", serverErr)
	}
	return serverURL
}

func findServer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u, nil
	}
	local := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	for {
		conn, err := pgx.Connect(ctx, local)
		if err == nil {
			conn.Close(ctx)
			return local, nil
		}
		if !serverBusy(err) {
			break // nothing there, or not for us: use the private cluster
		}
		// A server that is full or starting up is there: falling back would
		// leave this process alone on a cluster of its own (and, before the
		// reaper, running after the run). Wait for it instead.
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the server on 127.0.0.1:5432 answers but refuses connections: %w", err)
		case <-time.After(time.Second):
		}
	}
	// Held for the life of this process: the reaper stops the cluster once
	// every test process that uses it has exited.
	url, _, err := usePrivateCluster(ctx, filepath.Join(os.TempDir(), "rebill-test-pg"))
	return url, err
}

// serverBusy tells whether a connection error is a PostgreSQL server saying
// "not now": too many clients (class 53, insufficient resources) or starting
// up or shutting down (57P03). Connection refused, or a refusal for good
// (authentication), is not.
func serverBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "53") || pgErr.Code == "57P03")
}

// URL creates a fresh migrated database for this test, dropped when the
// test ends (also when it fails or panics), and returns its connection
// string.
func URL(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	admin := ServerURL(tb)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("connect to test server: %v", err)
	}
	defer conn.Close(ctx)

	template := "rebill_tpl_" + migrations.Checksum()
	sweepOnce.Do(func() { sweep(ctx, conn, template, time.Now(), tb.Logf) })
	name := newDatabaseName(time.Now())
	// One lock for both steps, so that a sweep of old templates (which
	// takes it too) never drops a template between its check and its use.
	if err := withLock(ctx, conn, func() error {
		if err := ensureTemplate(ctx, conn, admin, template); err != nil {
			return fmt.Errorf("prepare template database: %w", err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
			return fmt.Errorf("create test database: %w", err)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := dropDatabase(admin, name); err != nil {
			tb.Logf("dbtest: %v (a later run sweeps it)", err)
		}
	})
	return withDatabase(admin, name)
}

// dropDatabase drops name, closing whatever is still connected to it. A
// busy server (too many clients) gets a few more tries.
func dropDatabase(admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for try := 0; try < 5; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, admin); err != nil {
			continue
		}
		_, err = c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		c.Close(ctx)
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("drop test database %s: %w", name, err)
}

// Pool returns a pool of at most [PoolConns] connections on a fresh
// migrated database for this test.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("parse test database URL: %v", err)
	}
	cfg.MaxConns = PoolConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("open test pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// templateLock serialises template creation and cloning across every test
// process on the server ("rebill-dbtest").
const templateLock int64 = 0x7265_6269_6c6c_6474

func withLock(ctx context.Context, conn *pgx.Conn, fn func() error) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLock) }()
	return fn()
}

// ensureTemplate creates and migrates template unless it exists; the caller
// holds templateLock.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin, template string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := template + "_building"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(withDatabase(admin, building))
	if err != nil {
		return err
	}
	cfg.MaxConns = PoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, template))
	return err
}

func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.Path = "/" + name
	return u.String()
}
