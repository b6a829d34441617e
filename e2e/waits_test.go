package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Waits on state for assertions about what did not happen: a test that
// asserts "nothing more was sent" first waits until everything that could
// still send it has finished, instead of sleeping and hoping it would have.

// waitChargeJobsFinal waits until every River job of the charge is
// finalized (completed, cancelled or discarded): nothing queued, running,
// waiting to retry or scheduled for later can still act on it.
func (b testBundle) waitChargeJobsFinal(t *testing.T, chargeID string) {
	t.Helper()
	var open []string
	require.Eventually(t, func() bool {
		rows, err := b.pool.Query(context.Background(), `SELECT kind || ':' || state FROM river_job
			WHERE args->>'charge_id' = $1 AND finalized_at IS NULL ORDER BY id`, chargeID)
		require.NoError(t, err)
		open = open[:0]
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			open = append(open, s)
		}
		require.NoError(t, rows.Err())
		return len(open) == 0
	}, 30*time.Second, 20*time.Millisecond, "jobs of charge %s still open: %v", chargeID, func() any { return open })
}

// waitJobsIdle waits until no job of the kinds is queued or running: a
// run that was under way when it was called has committed whatever it
// did.
func (b testBundle) waitJobsIdle(t *testing.T, kinds ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var busy bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM river_job
			WHERE kind = ANY($1) AND state IN ('available', 'running'))`, kinds).Scan(&busy))
		return !busy
	}, 30*time.Second, 20*time.Millisecond, "jobs of kinds %v still queued or running", kinds)
}

// waitSnoozes waits until a job of kind for the charge has been put off
// (river.JobSnooze) at least n times: it ran again and again while what
// it waits on stayed away.
func (b testBundle) waitSnoozes(t *testing.T, kind, chargeID string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var snoozes int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(max((metadata->>'snoozes')::int), 0)
			FROM river_job WHERE kind = $1 AND args->>'charge_id' = $2`, kind, chargeID).Scan(&snoozes))
		return snoozes >= n
	}, 30*time.Second, 20*time.Millisecond, "%s of %s snoozed %d times", kind, chargeID, n)
}

// waitLockWaiter waits until a backend of the test's database waits for a
// lock on table: a call that the test holds up on purpose has reached the
// point where it is held.
func (b testBundle) waitLockWaiter(t *testing.T, table string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_locks
			WHERE NOT granted AND relation = to_regclass($1)
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, table).Scan(&waiting))
		return waiting
	}, 30*time.Second, 10*time.Millisecond, "nothing waits for a lock on %s", table)
}
