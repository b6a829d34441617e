package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/metrics"
)

// CleanupArgs is the periodic job that deletes records past their TTL.
type CleanupArgs struct{}

// Kind names the job in River.
func (CleanupArgs) Kind() string { return "idempotency_cleanup" }

// InsertOpts keeps one cleanup per period however many leaders enqueue.
func (CleanupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// CleanupWorker deletes idempotency records older than TTL. After that the
// same key is a new request; storage-level unique keys still prevent a
// duplicate effect.
type CleanupWorker struct {
	river.WorkerDefaults[CleanupArgs]
	Store *Store
	TTL   time.Duration
}

// Work runs one cleanup.
func (w *CleanupWorker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	n, err := w.Store.DeleteExpired(ctx, w.TTL)
	metrics.IdempotencyDeleted.Add(float64(n))
	if err != nil {
		return fmt.Errorf("idempotency cleanup: %w", err)
	}
	return nil
}
