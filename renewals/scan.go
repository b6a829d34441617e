package renewals

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/riverjob"
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
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// ScanWorker runs ScanArgs jobs.
type ScanWorker struct {
	river.WorkerDefaults[ScanArgs]
	Renewals *Renewals
}

// Work scans what is due, and scans again at once while the clock jumped
// further than a scan interval during the scan (a dev-clock move absorbed
// by this running scan). The wall clock moves a little during every scan;
// that wait is the next periodic scan's, not a reason to spin.
func (w *ScanWorker) Work(ctx context.Context, _ *river.Job[ScanArgs]) error {
	for {
		now := w.Renewals.Clock.Now()
		if _, err := w.Renewals.Scan(ctx, now); err != nil {
			return err
		}
		if w.Renewals.Clock.Now().Sub(now) <= w.Renewals.ScanInterval {
			return nil
		}
	}
}

// Timeout stays below River's rescue threshold, so a running scan is never
// rescued while alive; a scan cut short resumes where the data says.
func (w *ScanWorker) Timeout(*river.Job[ScanArgs]) time.Duration { return w.Renewals.ScanTimeout }

// ScanResult counts what one scan did.
type ScanResult struct {
	Cancelled int
	Resumed   int
	Enqueued  int
	Retries   int
	ToReview  int
	Notices   int

	// TrialsEnded counts the trials whose end came: ended with their
	// first period charged, or cancelled at their end.
	TrialsEnded int
}

// Scan does everything that is due at now, in batches of BatchSize rows,
// each batch its own short transaction: cancels scheduled at a period end
// that passed while paused or unpaid, scheduled resumes, trials that
// ended (with their first periods), due periods,
// dunning retries, the dead-letter sweep, and the customer notices. Safe
// to run concurrently and on several nodes: rows are claimed with FOR
// UPDATE SKIP LOCKED and every charge is created under its unique period
// key.
func (r *Renewals) Scan(ctx context.Context, now time.Time) (ScanResult, error) {
	defer metrics.TimeStage("scan")()
	var res ScanResult
	var err error
	if res.Cancelled, err = r.cancelDue(ctx, now); err != nil {
		return res, err
	}
	if res.Resumed, err = r.resumeDue(ctx, now); err != nil {
		return res, err
	}
	if res.TrialsEnded, err = r.endTrials(ctx, now); err != nil {
		return res, err
	}
	if res.Enqueued, err = r.chargeDue(ctx, now); err != nil {
		return res, err
	}
	if res.Retries, err = r.retryDue(ctx, now); err != nil {
		return res, err
	}
	if res.ToReview, err = r.sweepDiscarded(ctx, now); err != nil {
		return res, err
	}
	if r.Notices != nil {
		if res.Notices, err = r.Notices.SendNotices(ctx, now); err != nil {
			return res, err
		}
	}
	if n, err := charges.CountInReview(ctx, r.Pool); err == nil {
		metrics.ReviewQueueSize.Set(float64(n))
	}
	metrics.StageRuns.WithLabelValues("scan", "ok").Inc()
	metrics.ScanFinished()
	return res, nil
}

// inBatches runs fn in one transaction per batch until a batch comes back
// smaller than BatchSize.
func (r *Renewals) inBatches(ctx context.Context, what string, fn func(tx pgx.Tx) (int, error)) (int, error) {
	total := 0
	for {
		n := 0
		err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) (err error) {
			n, err = fn(tx)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		total += n
		if n < r.BatchSize {
			return total, nil
		}
	}
}

// cancelDue carries out the cancels scheduled at a period end that passed
// while the subscription was paused or unpaid, as of that end.
func (r *Renewals) cancelDue(ctx context.Context, now time.Time) (int, error) {
	return r.inBatches(ctx, "scheduled cancels", func(tx pgx.Tx) (int, error) {
		subs, err := r.Subscriptions.LockScheduledCancels(ctx, tx, now, r.BatchSize)
		if err != nil {
			return 0, err
		}
		for _, sub := range subs {
			if err := r.cancelScheduled(ctx, tx, sub); err != nil {
				return 0, err
			}
		}
		return len(subs), nil
	})
}

// resumeDue resumes paused subscriptions whose resume_at has come, as of
// resume_at; a period that then begins is due like any other.
func (r *Renewals) resumeDue(ctx context.Context, now time.Time) (int, error) {
	return r.inBatches(ctx, "scheduled resumes", func(tx pgx.Tx) (int, error) {
		subs, err := r.Subscriptions.LockResumes(ctx, tx, now, r.BatchSize)
		if err != nil {
			return 0, err
		}
		for _, sub := range subs {
			if _, _, err := r.Subscriptions.ResumeAt(ctx, tx, sub.ID, *sub.ResumeAt, subscriptions.System); err != nil {
				return 0, err
			}
		}
		return len(subs), nil
	})
}

// endTrials ends the trials whose end has come, as of their end: each
// subscription becomes active and its first period, which begins at the
// trial's end, is charged in the same transaction, so a trial ends once
// and its period is charged once whichever scan claims it. A trial with a
// cancel scheduled at its end is cancelled then instead, nothing charged.
func (r *Renewals) endTrials(ctx context.Context, now time.Time) (int, error) {
	return r.inBatches(ctx, "trials ended", func(tx pgx.Tx) (int, error) {
		subs, err := r.Subscriptions.LockTrialsEnded(ctx, tx, now, r.BatchSize)
		if err != nil {
			return 0, err
		}
		for _, sub := range subs {
			if _, err := r.Due(ctx, tx, sub); err != nil {
				return 0, err
			}
		}
		return len(subs), nil
	})
}

// chargeDue walks due subscriptions in keyset order (next_charge_at, id),
// one batch per transaction, so memory stays flat however many are due.
// ScanWorkers walkers run at once: each claims its rows with SKIP LOCKED,
// so they take disjoint batches, and each one's cursor only moves forward.
func (r *Renewals) chargeDue(ctx context.Context, now time.Time) (int, error) {
	walkers := max(r.ScanWorkers, 1)
	var total atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range walkers {
		g.Go(func() error {
			n, err := r.walkDue(ctx, now)
			total.Add(int64(n))
			return err
		})
	}
	err := g.Wait()
	return int(total.Load()), err
}

func (r *Renewals) walkDue(ctx context.Context, now time.Time) (int, error) {
	var (
		total   int
		afterAt = time.Time{}
		afterID = uuid.Nil
	)
	for {
		var batch []subscriptions.Subscription
		err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
			var err error
			batch, err = r.Subscriptions.LockDue(ctx, tx, now, afterAt, afterID, r.BatchSize)
			if err != nil {
				return err
			}
			n, _, err := r.charge(ctx, tx, batch, now)
			total += n
			return err
		})
		if err != nil {
			return total, fmt.Errorf("charge due periods: %w", err)
		}
		if len(batch) < r.BatchSize {
			return total, nil
		}
		last := batch[len(batch)-1]
		afterAt, afterID = last.NextChargeAt, last.ID
	}
}

// retryDue starts the dunning attempts whose time has come.
func (r *Renewals) retryDue(ctx context.Context, now time.Time) (int, error) {
	return r.inBatches(ctx, "dunning retries", func(tx pgx.Tx) (int, error) {
		retried, err := r.Charges.DueRetries(ctx, tx, now, r.BatchSize)
		return len(retried), err
	})
}

// sweepDiscarded sends to review the charges whose current job River
// discarded, and has their holds checked and released.
func (r *Renewals) sweepDiscarded(ctx context.Context, now time.Time) (int, error) {
	total := 0
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		swept, err := r.Charges.SweepDiscarded(ctx, tx, now)
		if err != nil {
			return err
		}
		for _, c := range swept {
			r.Logger.Warn().Str("charge_id", c.ID.String()).Int("attempt", c.AttemptCount).Str("review_code", string(c.ReviewCode)).
				Msg("charge sent to review: River discarded its job after the last attempt (River UI shows the job's errors)")
		}
		total = len(swept)
		retried, err := r.Charges.RetryDiscardedHoldChecks(ctx, tx, now, r.HoldCheckRetryAfter)
		for _, id := range retried {
			metrics.Retry("release_hold", metrics.RetryDiscarded)
			r.Logger.Warn().Int64("job_id", id).Msg("a hold check was discarded with its hold not released: River runs it again")
		}
		return err
	})
	return total, err
}
