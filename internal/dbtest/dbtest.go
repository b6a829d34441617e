// Package dbtest gives each test its own migrated PostgreSQL database, so
// test packages run in parallel without stepping on each other.
//
// The server is TEST_DATABASE_URL when set, else the one on 127.0.0.1:5432,
// else a private cluster started from the machine's PostgreSQL binaries.
// Databases are cloned from a template migrated once per schema checksum.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/internal/pgembed"
	"github.com/rebill/rebill/migrations"
)

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
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
	if conn, err := pgx.Connect(ctx, local); err == nil {
		conn.Close(ctx)
		return local, nil
	}
	cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(os.TempDir(), "rebill-test-pg")})
	if err != nil {
		return "", err
	}
	return cluster.URL("postgres"), nil
}

// URL creates a fresh migrated database for this test, dropped when the
// test ends, and returns its connection string.
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
	if err := ensureTemplate(ctx, conn, admin, template); err != nil {
		tb.Fatalf("prepare template database: %v", err)
	}
	name := "rebill_t_" + randomHex(6)
	if err := withLock(ctx, conn, func() error {
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template))
		return err
	}); err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
	})
	return withDatabase(admin, name)
}

// Pool returns a pool on a fresh migrated database for this test.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), URL(tb))
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

func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin, template string) error {
	return withLock(ctx, conn, func() error {
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
		pool, err := pgxpool.New(ctx, withDatabase(admin, building))
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
	})
}

func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
