package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
)

var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func newManual(t *testing.T) (*clock.Manual, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.Pool(t)
	m, err := clock.NewManual(context.Background(), pool, start)
	require.NoError(t, err)
	return m, pool
}

// A move belongs to its transaction: others see it once it commits, and a
// rolled-back move leaves no trace, not even in the clock's memory.
func TestMoveCommitsOrRollsBackWithItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, pool := newManual(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	moved, err := m.Advance(ctx, tx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, start.Add(time.Hour), moved)
	require.Equal(t, start, m.Now(), "not visible before the commit")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, start, m.Now(), "a rolled-back move never happened")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	moved, err = m.Set(ctx, tx, start.Add(48*time.Hour))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, moved, m.Now())
	require.Equal(t, start.Add(48*time.Hour), m.Now())
}

// Concurrent moves queue on the clock's row: the second starts from the
// time the first committed, so two advances of an hour make two hours.
func TestConcurrentMovesQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, pool := newManual(t)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = m.Advance(ctx, first, time.Hour)
	require.NoError(t, err)

	done := make(chan time.Time, 1)
	go func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			done <- time.Time{}
			return
		}
		moved, err := m.Advance(ctx, tx, time.Hour)
		if err != nil || tx.Commit(ctx) != nil {
			moved = time.Time{}
		}
		done <- moved
	}()
	select {
	case <-done:
		t.Fatal("the second move did not wait for the first")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, first.Commit(ctx))
	require.Equal(t, start.Add(2*time.Hour), <-done)
	require.Equal(t, start.Add(2*time.Hour), m.Now())
}

// A move never goes backwards nor more than MaxMoveYears ahead; a refused
// move changes nothing.
func TestMoveLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, pool := newManual(t)
	move := func(do func(tx pgx.Tx) (time.Time, error)) (time.Time, error) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		now, err := do(tx)
		if err == nil {
			require.NoError(t, tx.Commit(ctx))
		}
		return now, err
	}
	horizon := start.AddDate(clock.MaxMoveYears, 0, 0)

	_, err := move(func(tx pgx.Tx) (time.Time, error) { return m.Advance(ctx, tx, -time.Second) })
	require.ErrorIs(t, err, clock.ErrBackwards)
	_, err = move(func(tx pgx.Tx) (time.Time, error) { return m.Set(ctx, tx, start.Add(-time.Second)) })
	require.ErrorIs(t, err, clock.ErrBackwards)
	_, err = move(func(tx pgx.Tx) (time.Time, error) { return m.Set(ctx, tx, horizon.Add(time.Second)) })
	require.ErrorIs(t, err, clock.ErrTooFar)
	_, err = move(func(tx pgx.Tx) (time.Time, error) { return m.Advance(ctx, tx, horizon.Sub(start)+time.Second) })
	require.ErrorIs(t, err, clock.ErrTooFar)
	require.Equal(t, start, m.Now(), "refused moves change nothing")

	now, err := move(func(tx pgx.Tx) (time.Time, error) { return m.Set(ctx, tx, start) })
	require.NoError(t, err, "setting the current time again is allowed")
	require.Equal(t, start, now)
	now, err = move(func(tx pgx.Tx) (time.Time, error) { return m.Advance(ctx, tx, horizon.Sub(start)) })
	require.NoError(t, err, "ten years exactly is allowed")
	require.Equal(t, horizon, now)
	require.Equal(t, horizon, m.Now())
}

// A connection the server dropped (pg_terminate_backend, a failover) must
// not make Now answer this node's last seen time, which may be an hour
// stale and would be written as, say, a resumed subscription's billing
// anchor: a read that fails is tried again (the pool replaces a dropped
// connection) before the last seen time stands in.
func TestNowReadsAgainAfterTheConnectionIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, pool := newManual(t)
	require.Equal(t, start, m.Now())

	other, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, `UPDATE dev_clock SET now = now + interval '1 hour'`) // another node moves it
	require.NoError(t, err)
	require.Equal(t, start.Add(time.Hour), m.Now())
	_, err = other.Exec(ctx, `UPDATE dev_clock SET now = now + interval '1 hour'`)
	require.NoError(t, err)
	var dropped int
	require.NoError(t, other.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&dropped))
	require.Positive(t, dropped)
	require.Equal(t, start.Add(2*time.Hour), m.Now(), "a dropped connection is no reason for a stale time")
}
