package gisgmp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/fsm"
	"github.com/rebill/rebill/internal/metrics"
	"github.com/rebill/rebill/internal/pg"
	"github.com/rebill/rebill/internal/riverjob"
)

// PostingStatus is where a posting of a hold to the registry stands.
type PostingStatus string

const (
	// StatusPosting: the hold is placed; the payment is being posted.
	StatusPosting PostingStatus = "posting"
	// StatusAccepted: the registry holds the payment; the capture follows.
	StatusAccepted PostingStatus = "accepted"
	// StatusFailed: the registry never accepted it and never will (it
	// refused it, or, abandoned, holds no such payment); its hold is
	// released (the charge went to review unless it had moved on). Final.
	StatusFailed PostingStatus = "failed"
	// StatusCancelled: not posted, the charge no longer wanted it. Final.
	StatusCancelled PostingStatus = "cancelled"
	// StatusAnnulled: posted, then annulled because its money was not
	// captured, or found annulled at the registry (its money is then
	// never captured). Final.
	StatusAnnulled PostingStatus = "annulled"
	// StatusAbandoned: sent, fate unknown, money released. The hold was
	// released while the registry had not said whether it holds the
	// payment (still processing, an answer lost, the registry out of
	// reach): the job keeps asking, for as long as it takes, and the
	// payment is annulled if the registry accepted it. Not final: it ends
	// annulled, or failed once the registry says it never will accept it.
	StatusAbandoned PostingStatus = "abandoned"
)

// postingTransitions lists, for every status, the statuses a posting may
// move to: the one list of allowed moves, which move checks before its
// guarded UPDATE, and the package doc draws the same graph.
var postingTransitions = map[PostingStatus][]PostingStatus{
	StatusPosting:   {StatusAccepted, StatusFailed, StatusCancelled, StatusAnnulled, StatusAbandoned},
	StatusAccepted:  {StatusAnnulled},
	StatusAbandoned: {StatusAnnulled, StatusFailed},
	StatusFailed:    nil,
	StatusCancelled: nil,
	StatusAnnulled:  nil,
}

// PostingStatuses lists every posting status, in the order of the life
// cycle.
var PostingStatuses = []PostingStatus{StatusPosting, StatusAccepted, StatusAbandoned, StatusFailed, StatusCancelled,
	StatusAnnulled}

// Machine is the posting state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var Machine = fsm.New("registry posting", PostingStatuses, postingTransitions)

// CanTransition reports whether a posting in status from may move to
// status to. Staying in the same status is not a transition.
func CanTransition(from, to PostingStatus) bool { return Machine.Can(from, to) }

// Poster posts holds to the registry; it implements charges.Postings.
type Poster struct {
	Pool     *pgxpool.Pool
	Gateways *Balancer
	Clock    clock.Clock
	// Charges writes the charges' moves, publishes their events and
	// enqueues their jobs.
	Charges *charges.Store
	// Holds tells how long a hold may still be posted (charges PostBy):
	// the registry is told only of money that is held and can still be
	// captured at the price posted. Past it the posting is cancelled and
	// the hold voided.
	Holds *fleet.Gateways
	// GiveUpAfter bounds, on the service clock from the posting's
	// creation, how long a posting waits for a registry that does nothing;
	// then it fails for good.
	GiveUpAfter time.Duration
	// Retry spaces the waits and retries (real time).
	Retry  charges.RetryPolicy
	Logger zerolog.Logger
	// PaymentIDs derives the payment identifiers of new postings; a stored
	// posting keeps the one it was given.
	PaymentIDs PaymentIDs

	quittances quittanceCache
}

// maxPaymentIDTries bounds the identifiers tried for one posting whose
// first choices are other postings': a uip collides about once in 10^8 per
// pair of the day's postings, so this is never reached but by a bug.
const maxPaymentIDTries = 8

// Held stores the posting of c's hold and enqueues its job, in tx (the
// transaction that records the hold). A posting of the attempt already
// stored is kept with its identifier; an identifier another posting holds
// is passed over for the next one derived.
func (p *Poster) Held(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	now := p.Clock.Now()
	var id string
	for try := 0; id == "" && try < maxPaymentIDTries; try++ {
		candidate := p.PaymentIDs.ID(c.Key(), c.AttemptCount, c.Amount, now, try)
		if _, err := tx.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING`,
			candidate, c.ID, c.AttemptCount, c.RegistryUIN, c.Amount, StatusPosting, now); err != nil {
			return fmt.Errorf("store posting: %w", err)
		}
		err := tx.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1 AND attempt = $2`,
			c.ID, c.AttemptCount).Scan(&id)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("stored posting: %w", err)
		}
	}
	if id == "" {
		return fmt.Errorf("store posting: %d payment identifiers in a row belong to other postings", maxPaymentIDTries)
	}
	_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, PostArgs{PaymentID: id}, nil)
	return err
}

type posting struct {
	PaymentID string
	ChargeID  uuid.UUID
	Attempt   int
	UIN       string
	Amount    int64
	Status    PostingStatus
	CreatedAt time.Time
	// UpdatedAt is when it last moved: for an abandoned one, when it was
	// abandoned.
	UpdatedAt time.Time
}

func getPosting(ctx context.Context, db pg.DBTX, paymentID string) (posting, error) {
	var ps posting
	err := db.QueryRow(ctx, `SELECT payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at
		FROM registry_postings WHERE payment_id = $1`, paymentID).
		Scan(&ps.PaymentID, &ps.ChargeID, &ps.Attempt, &ps.UIN, &ps.Amount, &ps.Status, &ps.CreatedAt, &ps.UpdatedAt)
	if err != nil {
		return posting{}, fmt.Errorf("posting %s: %w", paymentID, err)
	}
	return ps, nil
}

// move is the one guarded move of a posting: from one of from to to, each
// a move the table allows (a *fsm.TransitionError, nothing written,
// otherwise); false when it was not in from.
func move(ctx context.Context, db pg.DBTX, paymentID string, from []PostingStatus, to PostingStatus, gateway, lastError string,
	now time.Time) (bool, error) {
	if err := Machine.Check(from, to); err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, `UPDATE registry_postings SET status = $3, gateway = coalesce(nullif($4, ''), gateway),
			last_error = nullif($5, ''), updated_at = $6
		WHERE payment_id = $1 AND status = ANY($2)`, paymentID, fsm.Texts(from), to, gateway, lastError, now)
	if err != nil {
		return false, fmt.Errorf("posting %s to %s: %w", paymentID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PostArgs posts one hold.
type PostArgs struct {
	PaymentID string `json:"payment_id" river:"unique"`
}

// Kind names the job in River.
func (PostArgs) Kind() string { return "registry_post" }

// InsertOpts makes the job unique per posting in every state.
func (PostArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// PostWorker runs PostArgs jobs.
type PostWorker struct {
	river.WorkerDefaults[PostArgs]
	Poster *Poster
}

// Work posts the hold and enqueues the capture, or gives up for good.
func (w *PostWorker) Work(ctx context.Context, job *river.Job[PostArgs]) error {
	return w.Poster.post(ctx, job)
}

func (p *Poster) post(ctx context.Context, job *river.Job[PostArgs]) error {
	defer metrics.TimeStage("posting")()
	ps, err := getPosting(ctx, p.Pool, job.Args.PaymentID)
	if err != nil {
		return err
	}
	switch ps.Status {
	case StatusPosting:
	case StatusAbandoned:
		return p.askAbandoned(ctx, ps)
	default:
		metrics.StageRuns.WithLabelValues("posting", "stale").Inc()
		return nil
	}
	c, err := charges.Get(ctx, p.Pool, ps.ChargeID)
	if err != nil {
		return err
	}
	now := p.Clock.Now()
	if c.Status != charges.Authorized || c.AttemptCount != ps.Attempt || c.VoidRequested {
		// The charge moved on (cancelled, withdrawn, superseded): nothing is
		// posted for it, and its own flow releases the hold.
		metrics.StageRuns.WithLabelValues("posting", "not_wanted").Inc()
		return p.settleUnsent(ctx, job, ps, c, "")
	}
	if by, ok := charges.PostBy(p.Holds, c); ok && !now.Before(by) {
		return p.tooLate(ctx, job, ps, c, by)
	}
	// The registry hears of this attempt only once the older ones of the
	// charge that it accepted are annulled.
	if err := p.annulOlder(ctx, ps); err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, err)
	}
	// Asked again, afresh, just before the registry hears of this hold: a
	// fine paid at a bank since the attempt was priced is not posted.
	paid, err := p.paidOutside(ctx, c, true)
	if err != nil {
		return p.waitToAskAgain(job, c, err)
	}
	if paid.Settled || paid.Amount > c.PaidOutside {
		return p.outpaid(ctx, job, ps, c, paid.Amount)
	}
	pay := Payment{PaymentID: ps.PaymentID, UIN: ps.UIN, Amount: ps.Amount, PaidAt: ps.CreatedAt.UTC()}
	gateway, err := p.Gateways.Post(ctx, pay)
	if _, pending := Pending(err); errors.Is(err, ErrUnknownOutcome) && !pending {
		metrics.Retry("posting", metrics.RetryUnknownOutcome)
		found, annulled, lerr := p.Gateways.Lookup(ctx, ps.PaymentID)
		switch _, pending := Pending(lerr); {
		case pending:
			err = lerr // it arrived, and is still processing
		case lerr != nil:
			return p.retryOrGiveUp(ctx, job, ps, c, fmt.Errorf("%w; lookup: %w", err, lerr))
		case !found:
			return p.retryOrGiveUp(ctx, job, ps, c, err) // never arrived: posted again, same id
		case annulled:
			err = fmt.Errorf("%w: found so by look-up after %w", ErrAnnulled, err)
		default:
			err = nil
		}
	}
	if errors.Is(err, ErrAnnulled) {
		return p.annulledThere(ctx, ps, c, err)
	}
	if pe, ok := Pending(err); ok {
		return p.stillProcessing(ctx, job, ps, c, pe)
	}
	if err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, err)
	}
	metrics.StageRuns.WithLabelValues("posting", "accepted").Inc()
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Str("gateway", gateway).
		Int64("amount", ps.Amount).Msg("posted to the registry")
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := move(ctx, tx, ps.PaymentID, []PostingStatus{StatusPosting}, StatusAccepted, gateway, "", p.Clock.Now())
		if err != nil || !moved {
			return err
		}
		return p.Charges.HoldPosted(ctx, tx, c.ID, ps.Attempt)
	})
}

// annulOlder annuls the accepted postings of earlier attempts of ps's
// charge.
func (p *Poster) annulOlder(ctx context.Context, ps posting) error {
	rows, err := p.Pool.Query(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1 AND attempt < $2 AND status = $3`,
		ps.ChargeID, ps.Attempt, StatusAccepted)
	if err != nil {
		return fmt.Errorf("older postings: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("older postings: %w", err)
	}
	for _, id := range ids {
		if err := p.annul(ctx, id, StatusAccepted, ""); err != nil {
			return err
		}
	}
	return nil
}

// annul annuls a posting the registry accepted, from status from, and
// records it once the registry confirms it, with note as its last error.
func (p *Poster) annul(ctx context.Context, paymentID string, from PostingStatus, note string) error {
	defer metrics.TimeStage("annulment")()
	_, err := p.Gateways.Annul(ctx, paymentID)
	if errors.Is(err, ErrUnknownOutcome) {
		found, annulled, lerr := p.Gateways.Lookup(ctx, paymentID)
		if lerr != nil || (found && !annulled) {
			return fmt.Errorf("annul %s: %w", paymentID, err)
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("annul %s: %w", paymentID, err)
	}
	metrics.StageRuns.WithLabelValues("annulment", "annulled").Inc()
	_, err = move(ctx, p.Pool, paymentID, []PostingStatus{from}, StatusAnnulled, "", note, p.Clock.Now())
	return err
}

// retryOrGiveUp waits for a registry that did not take the posting, or
// gives up on it: on a rejection the posting fails for good; past
// GiveUpAfter, or on the job's last attempt, it is abandoned, since an
// earlier try may have reached the registry. Either way the charge goes
// to review and its hold is released.
func (p *Poster) retryOrGiveUp(ctx context.Context, job *river.Job[PostArgs], ps posting, c charges.Charge, cause error) error {
	now := p.Clock.Now()
	final := errors.Is(cause, ErrRejected) || job.Attempt >= job.MaxAttempts || now.Sub(ps.CreatedAt) > p.GiveUpAfter
	if !final {
		if errors.Is(cause, ErrUnavailable) {
			metrics.Retry("posting", metrics.RetryRegistryUnavailable)
			delay := p.Retry.Delay(max(job.Attempt, 1))
			if by, ok := charges.PostBy(p.Holds, c); ok && by.After(now) {
				// Wake up in time to release a hold that can no longer be posted.
				delay = max(min(delay, by.Sub(now)), time.Second)
			}
			return river.JobSnooze(delay)
		}
		metrics.Retry("posting", metrics.RetryError)
		return fmt.Errorf("post %s: %w", ps.PaymentID, cause)
	}
	if !errors.Is(cause, ErrRejected) {
		return p.abandon(ctx, ps, c, cause, true)
	}
	metrics.StageRuns.WithLabelValues("posting", "failed").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).Msg("registry posting failed for good")
	return p.refuseHold(ctx, ps, c, StatusFailed, cause, charges.ReviewRegistryRejected)
}

// refuseHold moves ps from posting to status, for the reason cause, and
// sends its charge to review with code, releasing its hold, in one
// transaction: the registry will not hold this payment, so its money
// must not be captured.
func (p *Poster) refuseHold(ctx context.Context, ps posting, c charges.Charge, status PostingStatus, cause error,
	code charges.ReviewCode) error {
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := move(ctx, tx, ps.PaymentID, []PostingStatus{StatusPosting}, status, "", cause.Error(), p.Clock.Now())
		if err != nil || !moved {
			return err
		}
		_, err = p.Charges.HoldRefused(ctx, tx, c.ID, ps.Attempt, code, p.Clock.Now())
		if errors.Is(err, charges.ErrStale) {
			return nil // the charge moved on meanwhile; its own flow settles the hold
		}
		return err
	})
}

// stillProcessing waits for a posting the registry took but has not
// accepted yet: the job runs again after the gateway's Retry-After (its
// post then is a replay, answered with the outcome), not counting as a
// failure. Past GiveUpAfter the posting is abandoned: its hold is
// released, its payment withdrawn, and annulled should the registry
// accept it all the same.
func (p *Poster) stillProcessing(ctx context.Context, job *river.Job[PostArgs], ps posting, c charges.Charge, pe *PendingError) error {
	now := p.Clock.Now()
	if now.Sub(ps.CreatedAt) > p.GiveUpAfter {
		return p.abandon(ctx, ps, c, fmt.Errorf("not accepted within %s: %w", p.GiveUpAfter, pe), true)
	}
	metrics.StageRuns.WithLabelValues("posting", "pending").Inc()
	delay := pe.RetryAfter
	if delay <= 0 {
		delay = p.Retry.Delay(max(job.Attempt, 1))
	}
	if by, ok := charges.PostBy(p.Holds, c); ok && by.After(now) {
		// Wake up in time to release a hold that can no longer be posted.
		delay = min(delay, by.Sub(now))
	}
	return river.JobSnooze(max(delay, time.Second))
}

// tooLate enqueues the void of c's hold, past by, the last moment it
// could be posted (charges' void job checks the same bound), and settles
// the posting as never made: the charge then goes on as if the hold had
// not been captured in time, a discounted one to its full price. The void
// does not wait for the registry: when it cannot be asked, the posting
// stays open for this job's next run, which settles it once it can; while
// an earlier try is still processing there, it is abandoned.
func (p *Poster) tooLate(ctx context.Context, job *river.Job[PostArgs], ps posting, c charges.Charge, by time.Time) error {
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
func (p *Poster) waitToAskAgain(job *river.Job[PostArgs], c charges.Charge, cause error) error {
	if !errors.Is(cause, ErrUnavailable) {
		metrics.Retry("posting", metrics.RetryError)
		return fmt.Errorf("ask the registry again before posting: %w", cause)
	}
	metrics.Retry("posting", metrics.RetryRegistryUnavailable)
	now := p.Clock.Now()
	delay := p.Retry.Delay(max(job.Attempt, 1))
	if by, ok := charges.PostBy(p.Holds, c); ok && by.After(now) {
		delay = max(min(delay, by.Sub(now)), time.Second)
	}
	return river.JobSnooze(delay)
}

// outpaid releases c's hold, unposted, because paid was found paid
// outside rebill since the attempt was priced (c.PaidOutside): the next
// attempt, due at once, is priced again or finds the fine paid elsewhere.
func (p *Poster) outpaid(ctx context.Context, job *river.Job[PostArgs], ps posting, c charges.Charge, paid int64) error {
	metrics.StageRuns.WithLabelValues("posting", "paid_outside").Inc()
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Int64("paid_outside", paid).
		Int64("priced_with", c.PaidOutside).Msg("more of the fine was paid outside rebill: its hold is released unposted")
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error { return p.Charges.HoldOutpaid(ctx, tx, c.ID, ps.Attempt) })
	if err != nil && !errors.Is(err, charges.ErrStale) {
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
func (p *Poster) settleUnsent(ctx context.Context, job *river.Job[PostArgs], ps posting, c charges.Charge, note string) error {
	found, annulled, err := p.Gateways.Lookup(ctx, ps.PaymentID)
	if _, pending := Pending(err); pending {
		return p.abandon(ctx, ps, c, fmt.Errorf("hold released while an earlier try is still processing: %w", err), false)
	}
	if err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, fmt.Errorf("look up posting %s before cancelling it: %w", ps.PaymentID, err))
	}
	to := StatusCancelled
	switch {
	case found && annulled:
		to, note = StatusAnnulled, ""
	case found:
		to, note = StatusAccepted, ""
	}
	_, err = move(ctx, p.Pool, ps.PaymentID, []PostingStatus{StatusPosting}, to, "", note, p.Clock.Now())
	return err
}

// annulledThere records ps annulled because the registry holds its
// payment annulled (a look-up after a lost answer, or a replay, says so):
// its money is never captured on it, the charge goes to review and its
// hold is released. The payment id is never posted again: the fine is
// paid, if at all, by a new attempt, whose posting has an id of its own.
func (p *Poster) annulledThere(ctx context.Context, ps posting, c charges.Charge, cause error) error {
	metrics.StageRuns.WithLabelValues("posting", "annulled_at_registry").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).
		Msg("the registry holds the payment annulled: it is not captured, the hold is released")
	return p.refuseHold(ctx, ps, c, StatusAnnulled, cause, charges.ReviewRegistryAnnulled)
}

// abandon stops waiting for the registry to accept ps while it may still
// do so: the posting is abandoned and its hold released (when refuse, the
// charge goes to review, as for a refused posting; otherwise the caller's
// flow releases it). A payment still processing is asked to be withdrawn
// at once. The job then keeps asking (askAbandoned).
func (p *Poster) abandon(ctx context.Context, ps posting, c charges.Charge, cause error, refuse bool) error {
	metrics.StageRuns.WithLabelValues("posting", "abandoned").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).
		Msg("registry posting abandoned: its hold is released; it is annulled if the registry accepts it")
	now := p.Clock.Now()
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := move(ctx, tx, ps.PaymentID, []PostingStatus{StatusPosting}, StatusAbandoned, "", cause.Error(), now)
		if err != nil || !moved || !refuse {
			return err
		}
		_, err = p.Charges.HoldRefused(ctx, tx, c.ID, ps.Attempt, charges.ReviewRegistryUnanswered, now)
		if errors.Is(err, charges.ErrStale) {
			return nil // the charge moved on meanwhile; its own flow settles the hold
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("abandon posting %s: %w", ps.PaymentID, err)
	}
	if _, pending := Pending(cause); pending {
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
	switch _, pending := Pending(err); {
	case pending:
		p.withdraw(ctx, ps.PaymentID)
		return p.stillAbandoned(ps, now, err)
	case errors.Is(err, ErrRejected):
		to, note = StatusFailed, err.Error()
	case err != nil:
		return p.stillAbandoned(ps, now, err)
	case !found:
		to, note = StatusFailed, "abandoned, and the registry holds no such payment: it is not posted again"
	case annulled:
		to, note = StatusAnnulled, "abandoned, then found annulled at the registry"
	default:
		if err := p.annul(ctx, ps.PaymentID, StatusAbandoned, "abandoned, then found accepted at the registry: annulled there"); err != nil {
			return p.stillAbandoned(ps, now, err)
		}
		metrics.StageRuns.WithLabelValues("posting", "abandoned_annulled").Inc()
		p.Logger.Warn().Str("payment_id", ps.PaymentID).Msg("the registry accepted an abandoned posting: annulled there")
		return nil
	}
	if _, err := move(ctx, p.Pool, ps.PaymentID, []PostingStatus{StatusAbandoned}, to, "", note, now); err != nil {
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
	if err != nil || ps.Status != StatusAccepted {
		return err
	}
	return w.Poster.annul(ctx, ps.PaymentID, StatusAccepted, "")
}

// SweepArgs finds the accepted postings whose money was not captured.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "registry_sweep" }

// InsertOpts allows one pending or running sweep.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: riverjob.OneAtATime()}
}

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
		ids, err := charges.PostingsToAnnul(ctx, tx, 1000)
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
		WHERE status = $1`, StatusAbandoned, p.Clock.Now().Add(-p.GiveUpAfter)).Scan(&all, &overdue)
	if err != nil {
		return fmt.Errorf("count abandoned postings: %w", err)
	}
	metrics.RegistryAbandoned.Set(float64(all))
	metrics.RegistryAbandonedOverdue.Set(float64(overdue))
	return nil
}

// Register adds the registry's workers.
func Register(workers *river.Workers, p *Poster) {
	river.AddWorker(workers, &PostWorker{Poster: p})
	river.AddWorker(workers, &AnnulWorker{Poster: p})
	river.AddWorker(workers, &SweepWorker{Poster: p})
}
