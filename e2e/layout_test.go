package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// The leader runs charges_settled_layout on start; a run on a table with
// settled charges of before settled_at existed (made here by clearing it)
// fills them and marks the table done.
func TestSettledLayoutJobFillsOldCharges(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	count := func(query string, args ...any) int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, query, args...).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM river_job WHERE kind = 'charges_settled_layout' AND state = 'completed'`) > 0
	}, 20*time.Second, 50*time.Millisecond, "the leader runs the layout job on start")

	sub := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	_, err := b.pool.Exec(ctx, `UPDATE charges SET settled_at = NULL; UPDATE charges_layout SET settled_backfilled = false`)
	require.NoError(t, err)
	res, err := b.nodes[0].svc.River.Insert(ctx, charges.SettledLayoutArgs{}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, res.Job.ID) == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, count(`SELECT count(*) FROM charges_layout WHERE settled_backfilled`))
	require.Equal(t, 0, count(`SELECT count(*) FROM charges WHERE settled_at IS DISTINCT FROM updated_at`))
}
