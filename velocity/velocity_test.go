package velocity_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/dbtest"
	"github.com/rebill/rebill/internal/testsupport"
	"github.com/rebill/rebill/velocity"
)

func TestTakeCountsCommittedActionsPerWindow(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 45, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Creations: 2}}
	take := func(customer string, commit bool) error {
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()
		if err := lim.Take(t.Context(), tx, customer, velocity.Creations); err != nil {
			return err
		}
		if commit {
			require.NoError(t, tx.Commit(t.Context()))
		}
		return nil
	}

	require.NoError(t, take("c1", false), "rolled back: counts nothing")
	require.NoError(t, take("c1", true))
	require.NoError(t, take("c1", true))
	err := take("c1", true)
	var exceeded *velocity.ExceededError
	require.True(t, errors.As(err, &exceeded), "%v", err)
	require.Equal(t, 15*time.Minute, exceeded.RetryAfter, "until the end of the clock hour")
	require.Equal(t, 900, exceeded.RetryAfterSeconds())
	require.NoError(t, take("c2", true), "another customer counts apart")

	clk.Advance(15 * time.Minute) // 10:00: a new window
	require.NoError(t, take("c1", true))
	require.NoError(t, take("c1", true))
	require.Error(t, take("c1", true))

	t.Run("an unlimited limit counts nothing", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			return lim.Take(t.Context(), tx, "c1", velocity.PaymentMethodChanges)
		}))
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM velocity_counters WHERE name = $1`,
			velocity.PaymentMethodChanges.Name).Scan(&n))
		require.Zero(t, n)
	})
}

func TestDeclinesReachedPerUTCDay(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 2}}
	count := func() {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			return lim.Count(t.Context(), tx, "c1", velocity.Declines)
		}))
	}
	reached := func() bool {
		r, err := lim.Reached(t.Context(), pool, "c1", velocity.Declines)
		require.NoError(t, err)
		return r
	}
	require.False(t, reached())
	count()
	require.False(t, reached())
	count()
	require.True(t, reached())
	clk.Advance(time.Hour) // midnight UTC
	require.False(t, reached())
	count()
	require.False(t, reached())
}
