package charges

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/riverjob"
)

// post then is a replay, answered with the outcome), not counting as a
// failure. Past GiveUpAfter the posting is abandoned: its hold is
// released, its payment withdrawn, and annulled should the registry
// accept it all the same.
func (p *Poster) stillProcessing(ctx context.Context, job *river.Job[PostArgs], ps posting, c Charge, pe *registry.PendingError) error {
	now := p.Clock.Now()
	if now.Sub(ps.CreatedAt) > p.GiveUpAfter {
		return p.abandon(ctx, ps, c, fmt.Errorf("not accepted within %s: %w", p.GiveUpAfter, pe), true)
	}
	metrics.StageRuns.WithLabelValues("posting", "pending").Inc()
	delay := pe.RetryAfter
	if delay <= 0 {
		delay = p.Retry.Delay(max(job.Attempt, 1))
	}
	if by, ok := PostBy(p.Holds, c); ok && by.After(now) {
		// Wake up in time to release a hold that can no longer be posted.
		delay = min(delay, by.Sub(now))
	}
	return river.JobSnooze(max(delay, time.Second))
}

// tooLate enqueues the void of c's hold, past by, the last moment it
// could be posted (the void job carries this decision out rather than
// judging the bound again on its own reading of the clock and of the
// posting), and settles the posting as never made; one an earlier run
// made after all, recorded accepted, is annulled by the sweep once the
// hold is released. The charge then goes on as if the hold had
// not been captured in time, a discounted one to its full price. The void
// does not wait for the registry: when it cannot be asked, the posting
// stays open for this job's next run, which settles it once it can; while
// an earlier try is still processing there, it is abandoned.
func (p *Poster) tooLate(ctx context.Context, job *river.Job[PostArgs], ps posting, c Charge, by time.Time) error {
	metrics.StageRuns.WithLabelValues("posting", "too_late").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Time("post_by", by).
		Msg("the hold can no longer be posted in time: voiding it")
	if err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		return p.Charges.HoldUnpostable(ctx, tx, c.ID, ps.Attempt)
	}); err != nil {
		return fmt.Errorf("enqueue void of a hold too late to post: %w", err)
	}
	return p.settleUnsent(ctx, job, ps, c, "not posted: the hold could no longer be captured in time")
}

// waitToAskAgain waits for a registry that could not say, just before a
// posting, what was paid outside rebill: nothing is posted without the
// answer, and the wait alone never fails the posting (the job runs again
// in time for the hold's last moment to be posted, PostBy, past which the
// hold is released). An error other than the registry's is returned.
func (p *Poster) waitToAskAgain(job *river.Job[PostArgs], c Charge, cause error) error {
	if !errors.Is(cause, registry.ErrUnavailable) {
		metrics.Retry("posting", metrics.RetryError)
		return fmt.Errorf("ask the registry again before posting: %w", cause)
	}
	metrics.Retry("posting", metrics.RetryRegistryUnavailable)
	now := p.Clock.Now()
	delay := p.Retry.Delay(max(job.Attempt, 1))
	if by, ok := PostBy(p.Holds, c); ok && by.After(now) {
		delay = max(min(delay, by.Sub(now)), time.Second)
	}
	return river.JobSnooze(delay)
}

// outpaid releases c's hold, unposted, because paid was found paid
// outside rebill since the attempt was priced (c.PaidOutside): the next
// attempt, due at once, is priced again or finds the fine paid elsewhere.
func (p *Poster) outpaid(ctx context.Context, job *river.Job[PostArgs], ps posting, c Charge, paid int64) error {
	metrics.StageRuns.WithLabelValues("posting", "paid_outside").Inc()
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Int64("paid_outside", paid).
		Int64("priced_with", c.PaidOutside).Msg("more of the fine was paid outside rebill: its hold is released unposted")
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error { return p.Charges.HoldOutpaid(ctx, tx, c.ID, ps.Attempt) })
	if err != nil && !errors.Is(err, ErrStale) {
		return fmt.Errorf("release a hold paid outside rebill: %w", err)
	}
	return p.settleUnsent(ctx, job, ps, c, "not posted: more of the fine was paid outside rebill")
}

// settleUnsent records that ps, whose hold is being released, will not
// be made, once the registry, asked by its payment id, shows whether an
// earlier run made it after all (its answer lost): unknown there, it is
// cancelled (with note); known, it is recorded as accepted (or annulled),
// and the sweep annuls an accepted one, whose money was not captured;
// still processing there, it is abandoned (the hold's release goes on).
// While the registry cannot be asked nothing is recorded, and the job
// waits or gives up as retryOrGiveUp does.
func (p *Poster) settleUnsent(ctx context.Context, job *river.Job[PostArgs], ps posting, c Charge, note string) error {
	found, annulled, err := p.Gateways.Lookup(ctx, ps.PaymentID)
	if _, pending := registry.Pending(err); pending {
		return p.abandon(ctx, ps, c, fmt.Errorf("hold released while an earlier try is still processing: %w", err), false)
	}
	if err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, fmt.Errorf("look up posting %s before cancelling it: %w", ps.PaymentID, err))
	}
	to := PostingCancelled
	switch {
	case found && annulled:
		to, note = PostingAnnulled, ""
	case found:
		to, note = PostingAccepted, ""
	}
	_, err = movePosting(ctx, p.Pool, ps.PaymentID, []PostingStatus{PostingPosting}, to, "", note, p.Clock.Now())
	return err
}

// annulledThere records ps annulled because the registry holds its
// payment annulled (a look-up after a lost answer, or a replay, says so):
// its money is never captured on it, the charge goes to review and its
// hold is released. The payment id is never posted again: the fine is
// paid, if at all, by a new attempt, whose posting has an id of its own.
func (p *Poster) annulledThere(ctx context.Context, ps posting, c Charge, cause error) error {
	metrics.StageRuns.WithLabelValues("posting", "annulled_at_registry").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).
		Msg("the registry holds the payment annulled: it is not captured, the hold is released")
	return p.refuseHold(ctx, ps, c, PostingAnnulled, cause, ReviewRegistryAnnulled)
}

// abandon stops waiting for the registry to accept ps while it may still
// do so: the posting is abandoned and its hold released (when refuse, the
// charge goes to review, as for a refused posting; otherwise the caller's
// flow releases it). A payment still processing is asked to be withdrawn
// at once. The job then keeps asking (askAbandoned).
func (p *Poster) abandon(ctx context.Context, ps posting, c Charge, cause error, refuse bool) error {
	metrics.StageRuns.WithLabelValues("posting", "abandoned").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).
		Msg("registry posting abandoned: its hold is released; it is annulled if the registry accepts it")
	now := p.Clock.Now()
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := movePosting(ctx, tx, ps.PaymentID, []PostingStatus{PostingPosting}, PostingAbandoned, "", cause.Error(), now)
		if err != nil || !moved || !refuse {
			return err
		}
		_, err = p.Charges.HoldRefused(ctx, tx, c.ID, ps.Attempt, ReviewRegistryUnanswered, now)
		if errors.Is(err, ErrStale) {
			return nil // the charge moved on meanwhile; its own flow settles the hold
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("abandon posting %s: %w", ps.PaymentID, err)
	}
	if _, pending := registry.Pending(cause); pending {
		p.withdraw(ctx, ps.PaymentID)
	}
	return river.JobSnooze(p.abandonedWait(now, now))
}

// askAbandoned asks the registry what it holds of an abandoned posting and
// settles it by the answer: accepted, the payment is annulled there;
// annulled, so recorded; no such payment, or refused, the posting failed
// (it is never posted again, so the registry never will accept it). Still
// processing, the payment is asked to be withdrawn; no answer, or an
// annulment not confirmed, it asks again later. Meanwhile the job snoozes:
// it spends no River attempts and never gives up, since the registry may
// accept the payment at any time; the alert on
// rebill_registry_postings_abandoned_overdue tells people when it takes
// longer than REBILL_UNAVAILABLE_FOR.
func (p *Poster) askAbandoned(ctx context.Context, ps posting) error {
	found, annulled, err := p.Gateways.Lookup(ctx, ps.PaymentID)
	now := p.Clock.Now()
	var to PostingStatus
	var note string
	switch _, pending := registry.Pending(err); {
	case pending:
		p.withdraw(ctx, ps.PaymentID)
		return p.stillAbandoned(ps, now, err)
	case errors.Is(err, registry.ErrRejected):
		to, note = PostingFailed, err.Error()
	case err != nil:
		return p.stillAbandoned(ps, now, err)
	case !found:
		to, note = PostingFailed, "abandoned, and the registry holds no such payment: it is not posted again"
	case annulled:
		to, note = PostingAnnulled, "abandoned, then found annulled at the registry"
	default:
		if err := p.annul(ctx, ps.PaymentID, PostingAbandoned, "abandoned, then found accepted at the registry: annulled there"); err != nil {
			return p.stillAbandoned(ps, now, err)
		}
		metrics.StageRuns.WithLabelValues("posting", "abandoned_annulled").Inc()
		p.Logger.Warn().Str("payment_id", ps.PaymentID).Msg("the registry accepted an abandoned posting: annulled there")
		return nil
	}
	if _, err := movePosting(ctx, p.Pool, ps.PaymentID, []PostingStatus{PostingAbandoned}, to, "", note, now); err != nil {
		return p.stillAbandoned(ps, now, err)
	}
	metrics.StageRuns.WithLabelValues("posting", "abandoned_"+string(to)).Inc()
	return nil
}

// withdraw asks the registry to withdraw a payment still processing (an
// annulment of it, which the party carries out once the payment is done,
// docs/registry.md). Its outcome is not waited for: the next look-up
// shows it.
func (p *Poster) withdraw(ctx context.Context, paymentID string) {
	if _, err := p.Gateways.Annul(ctx, paymentID); err != nil {
		p.Logger.Info().Str("payment_id", paymentID).Err(err).Msg("withdrawal of an abandoned posting still processing: ask again later")
	}
}

// stillAbandoned snoozes the job of an abandoned posting that the
// registry has not settled yet (cause).
func (p *Poster) stillAbandoned(ps posting, now time.Time, cause error) error {
	metrics.Retry("posting", metrics.RetryUnknownOutcome)
	p.Logger.Info().Str("payment_id", ps.PaymentID).Err(cause).Msg("abandoned posting not settled yet: asking the registry again later")
	return river.JobSnooze(p.abandonedWait(ps.UpdatedAt, now))
}

// abandonedWait is how long the job of a posting abandoned at since waits
// before it asks the registry again: about as long as it has been
// abandoned on the service clock, so that the questions thin out as it
// ages, between REBILL_RETRY_BASE and REBILL_RETRY_MAX, jittered so that
// postings abandoned together (a registry outage) do not ask together.
func (p *Poster) abandonedWait(since, now time.Time) time.Duration {
	ceiling := min(max(now.Sub(since), p.Retry.Base), p.Retry.Max)
	return max(ceiling/2+rand.N(ceiling/2+1), time.Second)
}

// AnnulArgs annuls one accepted posting whose money was not captured.
type AnnulArgs struct {
	PaymentID string `json:"payment_id" river:"unique"`
}

// Kind names the job in River.
func (AnnulArgs) Kind() string { return "registry_annul" }

// InsertOpts makes the job unique per posting while it is pending or
// running (a failed annulment can be tried again by a later sweep).
func (AnnulArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// AnnulWorker runs AnnulArgs jobs.
type AnnulWorker struct {
	river.WorkerDefaults[AnnulArgs]
	Poster *Poster
}

// Work annuls the posting unless it is no longer accepted.
func (w *AnnulWorker) Work(ctx context.Context, job *river.Job[AnnulArgs]) error {
	ps, err := getPosting(ctx, w.Poster.Pool, job.Args.PaymentID)
	if err != nil || ps.Status != PostingAccepted {
		return err
	}
	return w.Poster.annul(ctx, ps.PaymentID, PostingAccepted, "")
}

// SweepArgs finds the accepted postings whose money was not captured.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "registry_sweep" }

// InsertOpts allows one pending or running sweep.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

// RegistrySweepJob runs the sweep every interval, and at start.
func RegistrySweepJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})
}

// RegistrySweepNow is the sweep's job, for a caller that enqueues it at
// once among others (dev mode, after its clock moved).
func RegistrySweepNow() river.InsertManyParams { return river.InsertManyParams{Args: SweepArgs{}} }

// SweepWorker runs SweepArgs jobs.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Poster *Poster
}

// Work enqueues the annulment of every accepted posting whose hold will
// not be captured: its attempt was superseded, or its charge was voided,
// declined (a discounted hold voided at the deadline), or is in review or
// failed with its hold released. It also counts the abandoned postings
// for /metrics.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	if err := w.Poster.countAbandoned(ctx); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, w.Poster.Pool, func(tx pgx.Tx) error {
		ids, err := PostingsToAnnul(ctx, tx, 1000)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		jobs := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			jobs[i] = river.InsertManyParams{Args: AnnulArgs{PaymentID: id}}
		}
		_, err = river.ClientFromContext[pgx.Tx](ctx).InsertManyTx(ctx, tx, jobs)
		return err
	})
}

// countAbandoned sets rebill_registry_postings_abandoned and, of them,
// rebill_registry_postings_abandoned_overdue: those abandoned longer than
// GiveUpAfter (REBILL_UNAVAILABLE_FOR) on the service clock, whose
// registry has not said for that long whether it accepted a payment whose
// money rebill released.
func (p *Poster) countAbandoned(ctx context.Context) error {
	var all, overdue int64
	err := p.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE updated_at < $2) FROM registry_postings
		WHERE status = $1`, PostingAbandoned, p.Clock.Now().Add(-p.GiveUpAfter)).Scan(&all, &overdue)
	if err != nil {
		return fmt.Errorf("count abandoned postings: %w", err)
	}
	metrics.RegistryAbandoned.Set(float64(all))
	metrics.RegistryAbandonedOverdue.Set(float64(overdue))
	return nil
}

// RegisterPoster adds the registry's workers.
func RegisterPoster(workers *river.Workers, p *Poster) {
	river.AddWorker(workers, &PostWorker{Poster: p})
	river.AddWorker(workers, &AnnulWorker{Poster: p})
	river.AddWorker(workers, &SweepWorker{Poster: p})
}
