package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"golang.org/x/sync/errgroup"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/internal/metrics"
	"github.com/rebill/rebill/subscriptions"
)

// ScanArgs is the periodic billing scan. Only River's leader enqueues it,
// and at most one is queued or running at a time; because it works from
// database state, a tick missed while no leader existed loses nothing.
type ScanArgs struct{}

// Kind names the job in River.
func (ScanArgs) Kind() string { return "billing_scan" }

// InsertOpts allows one pending or running scan: a trigger while one runs
// is absorbed, and the running scan looks at the clock again before it ends.
func (ScanArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateScheduled, rivertype.JobStateRetryable,
	}}}
}

// ScanWorker runs ScanArgs jobs.
type ScanWorker struct {
	river.WorkerDefaults[ScanArgs]
	Biller *Biller
}

// Work scans until nothing is due, rescanning if the clock moved meanwhile.
func (w *ScanWorker) Work(ctx context.Context, _ *river.Job[ScanArgs]) error {
	for {
		now := w.Biller.Clock.Now()
		if _, err := w.Biller.Scan(ctx, now); err != nil {
			return err
		}
		if !w.Biller.Clock.Now().After(now) {
			return nil
		}
	}
}

// Timeout stays below River's rescue threshold, so a running scan is never
// rescued while alive; a scan cut short resumes where the data says.
func (w *ScanWorker) Timeout(*river.Job[ScanArgs]) time.Duration { return w.Biller.ScanTimeout }

// ScanResult counts what one scan did.
type ScanResult struct {
	Resumed   int
	Enqueued  int
	Retries   int
	ToReview  int64
	Cancelled int
}

// Scan does everything that is due at now, in batches of BatchSize rows,
// each batch its own short transaction: scheduled resumes, due periods,
// dunning retries, and the dead-letter sweep. Safe to run concurrently and
// on several nodes: rows are claimed with FOR UPDATE SKIP LOCKED and every
// charge is created under its unique period key.
func (b *Biller) Scan(ctx context.Context, now time.Time) (ScanResult, error) {
	defer metrics.TimeStage("scan")()
	var res ScanResult
	var err error
	if res.Resumed, err = b.resumeDue(ctx, now); err != nil {
		return res, err
	}
	if res.Enqueued, err = b.chargeDue(ctx, now); err != nil {
		return res, err
	}
	if res.Retries, err = b.retryDue(ctx, now); err != nil {
		return res, err
	}
	if res.ToReview, err = charges.SweepDiscarded(ctx, b.Pool, now); err != nil {
		return res, fmt.Errorf("sweep discarded jobs: %w", err)
	}
	if n, err := charges.CountInReview(ctx, b.Pool); err == nil {
		metrics.ReviewQueueSize.Set(float64(n))
	}
	metrics.StageRuns.WithLabelValues("scan", "ok").Inc()
	return res, nil
}

// resumeDue resumes paused subscriptions whose resume_at has come; the new
// period starts at resume_at and is then due like any other.
func (b *Biller) resumeDue(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		n := 0
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, resume_at FROM subscriptions
				WHERE status = 'paused' AND resume_at <= $1 ORDER BY resume_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, now, b.BatchSize)
			if err != nil {
				return err
			}
			type due struct {
				id uuid.UUID
				at time.Time
			}
			dues, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
				var d due
				return d, r.Scan(&d.id, &d.at)
			})
			if err != nil {
				return err
			}
			for _, d := range dues {
				if _, _, err := b.Subscriptions.ResumeAt(ctx, tx, d.id, d.at, subscriptions.System); err != nil {
					return err
				}
			}
			n = len(dues)
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("scheduled resumes: %w", err)
		}
		total += n
		if n < b.BatchSize {
			return total, nil
		}
	}
}

// chargeDue walks due subscriptions in keyset order (next_charge_at, id),
// one batch per transaction, so memory stays flat however many are due.
// ScanWorkers walkers run at once: each claims its rows with SKIP LOCKED,
// so they take disjoint batches, and each one's cursor only moves forward.
func (b *Biller) chargeDue(ctx context.Context, now time.Time) (int, error) {
	walkers := max(b.ScanWorkers, 1)
	var total atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range walkers {
		g.Go(func() error {
			n, err := b.walkDue(ctx, now)
			total.Add(int64(n))
			return err
		})
	}
	err := g.Wait()
	return int(total.Load()), err
}

func (b *Biller) walkDue(ctx context.Context, now time.Time) (int, error) {
	var (
		total   int
		afterAt = time.Time{}
		afterID = uuid.Nil
	)
	for {
		var batch []subscriptions.Subscription
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			var err error
			batch, err = b.Subscriptions.LockDue(ctx, tx, now, afterAt, afterID, b.BatchSize)
			if err != nil {
				return err
			}
			n, _, err := b.bill(ctx, tx, batch, now)
			total += n
			return err
		})
		if err != nil {
			return total, fmt.Errorf("charge due periods: %w", err)
		}
		if len(batch) < b.BatchSize {
			return total, nil
		}
		last := batch[len(batch)-1]
		afterAt, afterID = last.NextChargeAt, last.ID
	}
}

// retryDue starts the dunning attempts whose time has come.
func (b *Biller) retryDue(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		var retried []charges.Charge
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			var err error
			if retried, err = charges.DueRetries(ctx, tx, now, b.BatchSize); err != nil {
				return err
			}
			return b.enqueueAuthorize(ctx, tx, retried)
		})
		if err != nil {
			return total, fmt.Errorf("dunning retries: %w", err)
		}
		total += len(retried)
		if len(retried) < b.BatchSize {
			return total, nil
		}
	}
}
