package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
)

// TestSampleQueuesCountsUnfinishedJobsAndLag reads river_job as River left
// it: unfinished jobs by queue and state, the age of the oldest due job,
// and 0 (not a stale figure) once a queue has emptied.
func TestSampleQueuesCountsUnfinishedJobsAndLag(t *testing.T) {
	pool := dbtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, state, scheduled_at, max_attempts, priority)
		VALUES ('k', '{}', 'default', 'available', now() - interval '90 seconds', 1, 1),
		       ('k', '{}', 'default', 'available', now() - interval '10 seconds', 1, 1),
		       ('k', '{}', 'default', 'scheduled', now() + interval '1 hour', 1, 1),
		       ('k', '{}', 'webhooks', 'retryable', now() + interval '1 minute', 1, 1),
		       ('k', '{}', 'other', 'available', now(), 1, 1)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, state, scheduled_at, max_attempts, priority, finalized_at)
		VALUES ('k', '{}', 'default', 'completed', now(), 1, 1, now())`)
	require.NoError(t, err)

	require.NoError(t, metrics.SampleQueues(ctx, pool, []string{"default", "webhooks"}))
	require.Equal(t, 2.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("default", "available")))
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("default", "scheduled")))
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("default", "running")))
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("webhooks", "retryable")))
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("other", "available")))
	lag := testutil.ToFloat64(metrics.RiverQueueLag.WithLabelValues("default"))
	require.InDelta(t, 90, lag, 5, "the oldest due job of default waited about 90 s")
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.RiverQueueLag.WithLabelValues("webhooks")), "nothing due on webhooks")

	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE queue = 'other'`)
	require.NoError(t, err)
	require.NoError(t, metrics.SampleQueues(ctx, pool, []string{"default", "webhooks"}))
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.RiverJobs.WithLabelValues("other", "available")), "an emptied queue drops to 0")
}
