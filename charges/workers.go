package charges

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// JobTimeout bounds a whole charge job: at most two gateway calls (a
// reconcile's lookup and resend) plus short transactions. River cancels the
// job's context past it, and River's rescue threshold must exceed it.
func JobTimeout(callTimeout time.Duration) time.Duration { return 2*callTimeout + 5*time.Second }

func (p *Pipeline) jobTimeout() time.Duration { return JobTimeout(p.CallTimeout) }

// AuthorizeWorker runs AuthorizeArgs jobs.
type AuthorizeWorker struct {
	river.WorkerDefaults[AuthorizeArgs]
	Pipeline *Pipeline
}

// Work places the hold.
func (w *AuthorizeWorker) Work(ctx context.Context, job *river.Job[AuthorizeArgs]) error {
	return w.Pipeline.Authorize(ctx, job)
}

// Timeout bounds one run.
func (w *AuthorizeWorker) Timeout(*river.Job[AuthorizeArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// CaptureWorker runs CaptureArgs jobs.
type CaptureWorker struct {
	river.WorkerDefaults[CaptureArgs]
	Pipeline *Pipeline
}

// Work captures the hold.
func (w *CaptureWorker) Work(ctx context.Context, job *river.Job[CaptureArgs]) error {
	return w.Pipeline.Capture(ctx, job)
}

// Timeout bounds one run.
func (w *CaptureWorker) Timeout(*river.Job[CaptureArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// VoidWorker runs VoidArgs jobs.
type VoidWorker struct {
	river.WorkerDefaults[VoidArgs]
	Pipeline *Pipeline
}

// Work releases the hold.
func (w *VoidWorker) Work(ctx context.Context, job *river.Job[VoidArgs]) error {
	return w.Pipeline.Void(ctx, job)
}

// Timeout bounds one run.
func (w *VoidWorker) Timeout(*river.Job[VoidArgs]) time.Duration { return w.Pipeline.jobTimeout() }

// ReconcileWorker runs ReconcileArgs jobs.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	Pipeline *Pipeline
}

// Work looks the lost call up and continues.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	return w.Pipeline.Reconcile(ctx, job)
}

// Timeout bounds one run.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// Register adds the pipeline's workers.
func Register(workers *river.Workers, p *Pipeline) {
	river.AddWorker(workers, &AuthorizeWorker{Pipeline: p})
	river.AddWorker(workers, &CaptureWorker{Pipeline: p})
	river.AddWorker(workers, &VoidWorker{Pipeline: p})
	river.AddWorker(workers, &ReconcileWorker{Pipeline: p})
}

// SweepDiscarded is the durable backstop of the dead-letter path: a charge
// whose current job River discarded (the rescuer gave up on a crashed
// last attempt, which no worker code sees) goes to review. It reads
// River's job table, the one place that records the discard.
func SweepDiscarded(ctx context.Context, db DBTX, now time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `UPDATE charges c SET status = 'requires_review', updated_at = $1,
			review_reason = 'River discarded the ' || j.kind || ' job after its last attempt'
		FROM river_job j
		WHERE j.state = 'discarded'
		  AND j.kind IN ('charge_authorize', 'charge_capture', 'charge_void', 'charge_reconcile')
		  AND (j.args ->> 'charge_id')::uuid = c.id
		  AND (j.args ->> 'attempt')::int = c.attempt_count
		  AND c.status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown')`, now)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
