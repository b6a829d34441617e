package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/testkit/dbtest"
)

func TestUpIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)

	// The template is already migrated: four concurrent nodes re-running
	// Up must all succeed and change nothing.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := pgxpool.New(ctx, pool.Config().ConnString())
			if err != nil {
				errs[i] = err
				return
			}
			defer p.Close()
			errs[i] = migrations.Up(ctx, p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	statuses, err := migrations.List(ctx, pool)
	require.NoError(t, err)
	for _, s := range statuses {
		require.True(t, s.Applied, "%s %d %s not applied", s.Source, s.Version, s.Name)
	}
	var gooseRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&gooseRows))
	require.Equal(t, len(statuses)-1, gooseRows, "each rebill migration recorded exactly once")
}

func TestUpOnEmptyDatabaseConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = migrations.Up(ctx, pool) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_migration`).Scan(&n))
	require.Positive(t, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM subscriptions`).Scan(&n))
}
