package charges

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// JobTimeout bounds a whole charge job: at most three gateway calls (a
// hold release's two lookups and its void) plus short transactions. River cancels the
// job's context past it, and River's rescue threshold must exceed it.
func JobTimeout(callTimeout time.Duration) time.Duration { return 3*callTimeout + 5*time.Second }

func (p *Pipeline) jobTimeout() time.Duration {
	return JobTimeout(p.Experiments.MaxTimeout(p.Gateways.MaxTimeout(p.CallTimeout)))
}

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

// LookupWorker runs LookupArgs jobs.
type LookupWorker struct {
	river.WorkerDefaults[LookupArgs]
	Pipeline *Pipeline
}

// Work looks the lost call up and continues.
func (w *LookupWorker) Work(ctx context.Context, job *river.Job[LookupArgs]) error {
	return w.Pipeline.LookUpOutcome(ctx, job)
}

// Timeout bounds one run.
func (w *LookupWorker) Timeout(*river.Job[LookupArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// ReleaseHoldWorker runs ReleaseHoldArgs jobs.
type ReleaseHoldWorker struct {
	river.WorkerDefaults[ReleaseHoldArgs]
	Pipeline *Pipeline
}

// Work checks the gateway and releases a forgotten hold.
func (w *ReleaseHoldWorker) Work(ctx context.Context, job *river.Job[ReleaseHoldArgs]) error {
	return w.Pipeline.ReleaseHold(ctx, job)
}

// Timeout bounds one run.
func (w *ReleaseHoldWorker) Timeout(*river.Job[ReleaseHoldArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// Register adds the pipeline's workers.
func Register(workers *river.Workers, p *Pipeline) {
	river.AddWorker(workers, &AuthorizeWorker{Pipeline: p})
	river.AddWorker(workers, &CaptureWorker{Pipeline: p})
	river.AddWorker(workers, &VoidWorker{Pipeline: p})
	river.AddWorker(workers, &LookupWorker{Pipeline: p})
	river.AddWorker(workers, &ReleaseHoldWorker{Pipeline: p})
	river.AddWorker(workers, &RefundSendWorker{Pipeline: p})
	river.AddWorker(workers, &RefundLookupWorker{Pipeline: p})
}
