package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/platform/riverjob"
)

// A fine's charge is held, then posted to the state payment registry (GIS
// GMP), then captured: the registry is told only of money that is held,
// and a fine counts as paid only once the registry holds its payment
// under the fine's UIN. This file holds the postings (the
// registry_postings table), their statuses and their machine, and the
// poster whose River job posts them through the registry port (package
// charges/registry, whose doc tells how a payment id makes a retry a
// replay); poster_abandon.go what follows a posting given up on, the
// annulments and the sweep.
//
// When the pipeline records a hold of a charge with a UIN it calls
// [Poster.Held], which stores a posting and enqueues its [PostArgs] job in
// the same transaction; the job posts through the registry gateways
// (asynchronously: the registry is not built for synchronous traffic)
// and, once the registry accepted the payment, enqueues the charge's
// capture. A posting that fails for good sends the charge to review, whose
// hold check voids the hold. A posting whose answer was lost is looked up
// by its payment_id before it is sent again. A posting whose money was
// not captured (the hold was voided, the capture failed for good, the
// attempt was superseded) is annulled, an idempotent operation of its
// own: by the sweep, and before a newer attempt of the same charge is
// posted. A payment the registry holds under the identifier of an
// earlier attempt of the charge while no posting names it (a restore
// forgot the posting) is recorded again, accepted, when the registry's
// quittance shows it (recoverForgotten), and annulled the same way. A
// payment the registry holds annulled is never captured: its
// hold is released, and a new payment comes only with a new attempt,
// under a new payment_id.
//
// Every allowed move of a posting is listed once, in [PostingMachine]'s table;
// each is a guarded UPDATE (`WHERE status = ANY(from)`), so a job that
// runs twice, or late, changes nothing the second time.
//
//	posting --(the registry took it)--> accepted --(its money not captured)--> annulled
//	posting --(rejected)--> failed
//	posting --(no longer wanted before it was sent)--> cancelled
//	posting --(no longer wanted, but an earlier run's answer was lost)--> accepted | annulled (as the registry shows it)
//	posting --(the registry holds it annulled: never captured)--> annulled
//	posting --(hold released, fate at the registry unknown)--> abandoned
//	abandoned --(the registry accepted it: annulled there; or shows it annulled)--> annulled
//	abandoned --(the registry holds no such payment, or refused it)--> failed
//
// failed, cancelled and annulled are final. abandoned is not: a posting
// whose hold was released while the registry may still accept it (still
// processing past the last moment to post, an answer lost and no look-up
// answered, the registry out of reach past REBILL_UNAVAILABLE_FOR) keeps
// its job asking, snoozed with a growing wait, until the registry says
// what it holds; rebill_registry_postings_abandoned_overdue counts those
// abandoned longer than REBILL_UNAVAILABLE_FOR (alert
// RebillRegistryPostingAbandoned).

// PostingStatus is where a posting of a hold to the registry stands.
type PostingStatus string

const (
	// PostingPosting: the hold is placed; the payment is being posted.
	PostingPosting PostingStatus = "posting"
	// PostingAccepted: the registry holds the payment; the capture follows.
	PostingAccepted PostingStatus = "accepted"
	// PostingFailed: the registry never accepted it and never will (it
	// refused it, or, abandoned, holds no such payment); its hold is
	// released (the charge went to review unless it had moved on). Final.
	PostingFailed PostingStatus = "failed"
	// PostingCancelled: not posted, the charge no longer wanted it. Final.
	PostingCancelled PostingStatus = "cancelled"
	// PostingAnnulled: posted, then annulled because its money was not
	// captured, or found annulled at the registry (its money is then
	// never captured). Final.
	PostingAnnulled PostingStatus = "annulled"
	// PostingAbandoned: sent, fate unknown, money released. The hold was
	// released while the registry had not said whether it holds the
	// payment (still processing, an answer lost, the registry out of
	// reach): the job keeps asking, for as long as it takes, and the
	// payment is annulled if the registry accepted it. Not final: it ends
	// annulled, or failed once the registry says it never will accept it.
	PostingAbandoned PostingStatus = "abandoned"
)

// postingTransitions lists, for every status, the statuses a posting may
// move to: the one list of allowed moves, which move checks before its
// guarded UPDATE, and the package doc draws the same graph.
var postingTransitions = map[PostingStatus][]PostingStatus{
	PostingPosting:   {PostingAccepted, PostingFailed, PostingCancelled, PostingAnnulled, PostingAbandoned},
	PostingAccepted:  {PostingAnnulled},
	PostingAbandoned: {PostingAnnulled, PostingFailed},
	PostingFailed:    nil,
	PostingCancelled: nil,
	PostingAnnulled:  nil,
}

// PostingStatuses lists every posting status, in the order of the life
// cycle.
var PostingStatuses = []PostingStatus{PostingPosting, PostingAccepted, PostingAbandoned, PostingFailed, PostingCancelled,
	PostingAnnulled}

// PostingMachine is the posting state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var PostingMachine = fsm.New("registry posting", PostingStatuses, postingTransitions)

// CanPostingTransition reports whether a posting in status from may move to
// status to. Staying in the same status is not a transition.
func CanPostingTransition(from, to PostingStatus) bool { return PostingMachine.Can(from, to) }

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

// movePosting is the one guarded move of a posting: from one of from to to, each
// a move the table allows (a *fsm.TransitionError, nothing written,
// otherwise); false when it was not in from.
func movePosting(ctx context.Context, db pg.DBTX, paymentID string, from []PostingStatus, to PostingStatus, gateway, lastError string,
	now time.Time) (bool, error) {
	mv, err := PostingMachine.Move(to, from...)
	if err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, `UPDATE registry_postings SET status = $3, gateway = coalesce(nullif($4, ''), gateway),
			last_error = nullif($5, ''), updated_at = $6
		WHERE payment_id = $1 AND status = ANY($2)`, paymentID, fsm.Texts(mv.From()), mv.To(), gateway, lastError, now)
	if err != nil {
		return false, fmt.Errorf("posting %s to %s: %w", paymentID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Poster posts holds to the registry; it implements Postings.
type Poster struct {
	Pool     *pgxpool.Pool
	Gateways *registry.Balancer
	Clock    clock.Clock
	// Charges writes the charges' moves, publishes their events and
	// enqueues their jobs.
	Charges *Store
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
	Retry  RetryPolicy
	Logger zerolog.Logger
	// PaymentIDs derives the payment identifiers of new postings; a stored
	// posting keeps the one it was given.
	PaymentIDs registry.PaymentIDs

	quittances quittanceCache
}

// maxPaymentIDTries bounds the identifiers tried for one posting whose
// first choices are other postings': a uip collides about once in 10^8 per
// pair of the day's postings, so this is never reached but by a bug.
const maxPaymentIDTries = 8

// Held stores the posting of c's hold and enqueues its job, in tx (the
// transaction that records the hold). A posting of the attempt already
// stored is kept with its identifier; an identifier another posting holds
// is passed over for the next one derived. The identifier's day is the
// charge's period start (a bill's due day), not the day of the hold.
func (p *Poster) Held(ctx context.Context, tx pgx.Tx, c Charge) error {
	now := p.Clock.Now()
	var id string
	for try := 0; id == "" && try < maxPaymentIDTries; try++ {
		candidate := p.PaymentIDs.ID(c.Key(), c.AttemptCount, c.Amount, c.PeriodStart, try)
		if _, err := tx.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING`,
			candidate, c.ID, c.AttemptCount, c.RegistryUIN, c.Amount, PostingPosting, now); err != nil {
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
	case PostingPosting:
	case PostingAbandoned:
		return p.askAbandoned(ctx, ps)
	default:
		metrics.StageRuns.WithLabelValues("posting", "stale").Inc()
		return nil
	}
	c, err := Get(ctx, p.Pool, ps.ChargeID)
	if err != nil {
		return err
	}
	now := p.Clock.Now()
	if c.Status != Authorized || c.AttemptCount != ps.Attempt || c.VoidRequested {
		// The charge moved on (cancelled, withdrawn, superseded): nothing is
		// posted for it, and its own flow releases the hold.
		metrics.StageRuns.WithLabelValues("posting", "not_wanted").Inc()
		return p.settleUnsent(ctx, job, ps, c, "")
	}
	if by, ok := PostBy(p.Holds, c); ok && !now.Before(by) {
		return p.tooLate(ctx, job, ps, c, by)
	}
	// The registry hears of this attempt only once the older ones of the
	// charge that it accepted are annulled.
	if err := p.annulOlder(ctx, ps); err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, err)
	}
	// Asked again, afresh, just before the registry hears of this hold: a
	// fine paid at a bank since the attempt was priced is not posted.
	paid, recovered, err := p.paidOutside(ctx, c, true)
	if err != nil {
		return p.waitToAskAgain(job, c, err)
	}
	if recovered {
		// An older attempt's payment the database forgot was just recorded
		// again: annulled first, as above.
		if err := p.annulOlder(ctx, ps); err != nil {
			return p.retryOrGiveUp(ctx, job, ps, c, err)
		}
	}
	if paid.Settled || paid.Amount > c.PaidOutside {
		return p.outpaid(ctx, job, ps, c, paid.Amount)
	}
	pay := registry.Payment{PaymentID: ps.PaymentID, UIN: ps.UIN, Amount: ps.Amount, PaidAt: ps.CreatedAt.UTC()}
	gateway, err := p.Gateways.Post(ctx, pay)
	if _, pending := registry.Pending(err); errors.Is(err, registry.ErrUnknownOutcome) && !pending {
		metrics.Retry("posting", metrics.RetryUnknownOutcome)
		found, annulled, lerr := p.Gateways.Lookup(ctx, ps.PaymentID)
		switch _, pending := registry.Pending(lerr); {
		case pending:
			err = lerr // it arrived, and is still processing
		case lerr != nil:
			return p.retryOrGiveUp(ctx, job, ps, c, fmt.Errorf("%w; lookup: %w", err, lerr))
		case !found:
			return p.retryOrGiveUp(ctx, job, ps, c, err) // never arrived: posted again, same id
		case annulled:
			err = fmt.Errorf("%w: found so by look-up after %w", registry.ErrAnnulled, err)
		default:
			err = nil
		}
	}
	if errors.Is(err, registry.ErrAnnulled) {
		return p.annulledThere(ctx, ps, c, err)
	}
	if pe, ok := registry.Pending(err); ok {
		return p.stillProcessing(ctx, job, ps, c, pe)
	}
	if err != nil {
		return p.retryOrGiveUp(ctx, job, ps, c, err)
	}
	metrics.StageRuns.WithLabelValues("posting", "accepted").Inc()
	p.Logger.Info().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Str("gateway", gateway).
		Int64("amount", ps.Amount).Msg("posted to the registry")
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := movePosting(ctx, tx, ps.PaymentID, []PostingStatus{PostingPosting}, PostingAccepted, gateway, "", p.Clock.Now())
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
		ps.ChargeID, ps.Attempt, PostingAccepted)
	if err != nil {
		return fmt.Errorf("older postings: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("older postings: %w", err)
	}
	for _, id := range ids {
		if err := p.annul(ctx, id, PostingAccepted, ""); err != nil {
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
	if errors.Is(err, registry.ErrUnknownOutcome) {
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
	_, err = movePosting(ctx, p.Pool, paymentID, []PostingStatus{from}, PostingAnnulled, "", note, p.Clock.Now())
	return err
}

// retryOrGiveUp waits for a registry that did not take the posting, or
// gives up on it: on a rejection the posting fails for good; past
// GiveUpAfter, or on the job's last attempt, it is abandoned, since an
// earlier try may have reached the registry. Either way the charge goes
// to review and its hold is released.
func (p *Poster) retryOrGiveUp(ctx context.Context, job *river.Job[PostArgs], ps posting, c Charge, cause error) error {
	now := p.Clock.Now()
	final := errors.Is(cause, registry.ErrRejected) || job.Attempt >= job.MaxAttempts || now.Sub(ps.CreatedAt) > p.GiveUpAfter
	if !final {
		if errors.Is(cause, registry.ErrUnavailable) {
			metrics.Retry("posting", metrics.RetryRegistryUnavailable)
			delay := p.Retry.Delay(max(job.Attempt, 1))
			if by, ok := PostBy(p.Holds, c); ok && by.After(now) {
				// Wake up in time to release a hold that can no longer be posted.
				delay = max(min(delay, by.Sub(now)), time.Second)
			}
			return river.JobSnooze(delay)
		}
		metrics.Retry("posting", metrics.RetryError)
		return fmt.Errorf("post %s: %w", ps.PaymentID, cause)
	}
	if !errors.Is(cause, registry.ErrRejected) {
		return p.abandon(ctx, ps, c, cause, true)
	}
	metrics.StageRuns.WithLabelValues("posting", "failed").Inc()
	p.Logger.Warn().Str("charge_id", c.ID.String()).Str("payment_id", ps.PaymentID).Err(cause).Msg("registry posting failed for good")
	return p.refuseHold(ctx, ps, c, PostingFailed, cause, ReviewRegistryRejected)
}

// refuseHold moves ps from posting to status, for the reason cause, and
// sends its charge to review with code, releasing its hold, in one
// transaction: the registry will not hold this payment, so its money
// must not be captured.
func (p *Poster) refuseHold(ctx context.Context, ps posting, c Charge, status PostingStatus, cause error,
	code ReviewCode) error {
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, err := movePosting(ctx, tx, ps.PaymentID, []PostingStatus{PostingPosting}, status, "", cause.Error(), p.Clock.Now())
		if err != nil || !moved {
			return err
		}
		_, err = p.Charges.HoldRefused(ctx, tx, c.ID, ps.Attempt, code, p.Clock.Now())
		if errors.Is(err, ErrStale) {
			return nil // the charge moved on meanwhile; its own flow settles the hold
		}
		return err
	})
}

// stillProcessing waits for a posting the registry took but has not
// accepted yet: the job runs again after the gateway's Retry-After (its
