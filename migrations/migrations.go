// Package migrations applies rebill's schema: its own tables from embedded
// SQL files through goose, then River's tables through rivermigrate.
//
// Both run under one PostgreSQL advisory lock so that several nodes starting
// at once serialise instead of racing: rivermigrate takes no lock of its own.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// lockID is the advisory lock key every migrating node waits on
// ("rebill-migrate" folded into an int64).
const lockID int64 = 0x7265_6269_6c6c_6d67

// Status is one line of `rebill migrate` output.
type Status struct {
	Source  string // "rebill" or "river"
	Version int64
	Name    string
	Applied bool
}

// Up applies every pending migration. Running it again is a no-op, and
// concurrent callers wait for each other on the advisory lock (see takeLock).
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire migration connection: %w", err)
	}
	defer conn.Release()
	if err := takeLock(ctx, conn); err != nil {
		return err
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockID)
	}()

	provider, db, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply rebill migrations: %w", err)
	}

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("create river migrator: %w", err)
	}
	// River's migrations cannot share one transaction (an enum value added
	// by one is used by the next), so they run version by version while this
	// connection holds the lock.
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("apply river migrations: %w", err)
	}
	return nil
}

// lockPoll is how often a node waiting for another's migration asks for
// the lock again.
const lockPoll = 150 * time.Millisecond

// takeLock takes the migration lock on conn, asking again every lockPoll
// until it is free or ctx is done. It polls pg_try_advisory_lock rather
// than waiting in pg_advisory_lock: a session waiting in a statement holds
// a snapshot, and CREATE INDEX CONCURRENTLY in the lock holder's migration
// waits for every older snapshot to go, so the two would wait for each
// other for ever. Between polls the waiting session holds none.
func takeLock(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockID).Scan(&got); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the migration lock: %w", ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// List reports every known migration of rebill and whether it is applied,
// followed by River's schema version.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	provider, db, err := newProvider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	statuses, err := provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("read rebill migration status: %w", err)
	}
	out := make([]Status, 0, len(statuses)+1)
	for _, s := range statuses {
		out = append(out, Status{
			Source:  "rebill",
			Version: s.Source.Version,
			Name:    s.Source.Path,
			Applied: s.State == goose.StateApplied,
		})
	}

	var riverVersion int64
	err = pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM river_migration WHERE line = 'main'`).Scan(&riverVersion)
	if err != nil {
		// river_migration is absent before the first Up.
		riverVersion = 0
	}
	out = append(out, Status{Source: "river", Version: riverVersion, Name: "river_migration (line main)", Applied: riverVersion > 0})
	return out, nil
}

func newProvider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	fsys, err := fs.Sub(sqlFiles, "sql")
	if err != nil {
		return nil, nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create goose provider: %w", err)
	}
	return provider, db, nil
}

// Checksum identifies the schema that the embedded migrations produce, so
// that test harnesses can key a migrated template database on it and never
// clone a stale one.
func Checksum() string {
	h := sha256.New()
	_ = fs.WalkDir(sqlFiles, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := sqlFiles.ReadFile(path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	h.Write([]byte(riverVersionTag))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// riverVersionTag changes the checksum when River's migrations may change.
const riverVersionTag = "river-v0.51.2"
