package scheduler_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// Enqueueing an attempt's authorize job twice leaves one job: callers
// (a card change retrying what a scan already enqueued) rely on it.
func TestEnqueueAuthorizeTwiceIsHarmless(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := charges.Charge{ID: uuid.New(), AttemptCount: 1}
	for range 2 {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		err = b.biller.EnqueueAuthorize(ctx, tx, []charges.Charge{c})
		if err != nil {
			_ = tx.Rollback(ctx)
		}
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'charge_authorize'`).Scan(&n))
	require.Equal(t, 1, n)
}
