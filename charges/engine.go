package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// The verbs other packages drive the pipeline with: each changes the
// charges and enqueues the jobs that follow in the caller's transaction,
// so the pipeline's job arguments and its SQL stay in this package.

// Queue is what the store needs of the River client.
type Queue interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
	JobRetryTx(ctx context.Context, tx pgx.Tx, id int64) (*rivertype.JobRow, error)
}

// queue is the store's Queue, or, in a job's run, the River client that
// runs it.
func (s *Store) queue(ctx context.Context) (Queue, error) {
	if s != nil && s.Queue != nil {
		return s.Queue, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, errors.New("charges: no River client to enqueue with")
	}
	return client, nil
}

// enqueue inserts jobs in tx.
func (s *Store) enqueue(ctx context.Context, tx pgx.Tx, jobs []river.InsertManyParams) error {
	if len(jobs) == 0 {
		return nil
	}
	q, err := s.queue(ctx)
	if err != nil {
		return err
	}
	if _, err := q.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue %d charge jobs: %w", len(jobs), err)
	}
	return nil
}

// each is one job per charge, args made by of.
func each(cs []Charge, of func(c Charge) river.JobArgs) []river.InsertManyParams {
	jobs := make([]river.InsertManyParams, 0, len(cs))
	for _, c := range cs {
		if args := of(c); args != nil {
			jobs = append(jobs, river.InsertManyParams{Args: args})
		}
	}
	return jobs
}

// start enqueues, in tx, the authorize step of each charge's current
// attempt: new charges (Create, CreateForBill), or attempts their move
// just began. It is unique per attempt, so starting one twice is
// harmless.
func (s *Store) start(ctx context.Context, tx pgx.Tx, cs []Charge) error {
	return s.enqueue(ctx, tx, each(cs, func(c Charge) river.JobArgs {
		return AuthorizeArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	}))
}

// voidsOfHolds enqueues the release of the holds among cs (authorized).
func (s *Store) voidsOfHolds(ctx context.Context, tx pgx.Tx, cs []Charge) error {
	return s.enqueue(ctx, tx, each(cs, func(c Charge) river.JobArgs {
		if c.Status != Authorized {
			return nil
		}
		return VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	}))
}

// StopSubscription stops the charges of a cancelled subscription from
// taking money, in tx: those no attempt works on are voided at once, those
// that may hold money are flagged so that no capture starts, and the holds
// already placed are released by void jobs. A capture in flight finishes.
func (s *Store) StopSubscription(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time) error {
	flagged, err := s.requestVoid(ctx, tx, subscriptionID, now)
	if err != nil {
		return err
	}
	return s.voidsOfHolds(ctx, tx, flagged)
}

// StopBills is StopSubscription for an enrollment's charges (all of them,
// or the one with id chargeID when it is not uuid.Nil), remembering code
// as the reason their voids record.
func (s *Store) StopBills(ctx context.Context, tx pgx.Tx, enrollmentID, chargeID uuid.UUID, code string, now time.Time) error {
	flagged, err := s.requestBillVoid(ctx, tx, enrollmentID, chargeID, code, now)
	if err != nil {
		return err
	}
	return s.voidsOfHolds(ctx, tx, flagged)
}

// HoldPosted enqueues, in tx, the capture of a fine's hold (attempt) that
// the state payment registry accepted.
func (s *Store) HoldPosted(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, attempt int) error {
	return s.enqueue(ctx, tx, []river.InsertManyParams{{Args: CaptureArgs{ChargeID: chargeID, Attempt: attempt}}})
}

// HoldUnpostable enqueues, in tx, the void of a fine's hold (attempt) that
// will not be posted to the registry: past its last moment to be posted
// (PostBy), or paid outside rebill since it was priced (HoldOutpaid). The
// job carries the decision and releases the hold as long as the charge
// stands authorized at that attempt: the poster settles the posting as
// never made right after, and neither posts it later nor captures it.
func (s *Store) HoldUnpostable(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, attempt int) error {
	return s.enqueue(ctx, tx, []river.InsertManyParams{{Args: VoidArgs{ChargeID: chargeID, Attempt: attempt, Unpostable: true}}})
}

// HoldRefused sends an authorized charge whose hold may not be captured
// (its posting to the registry failed for good, or there is no registry)
// to review with code, and enqueues the release of its hold, in tx; the
// caller logs why. Returns ErrStale when the charge left that attempt's
// authorized status.
func (s *Store) HoldRefused(ctx context.Context, tx pgx.Tx, id uuid.UUID, attempt int, code ReviewCode, now time.Time) (Charge, error) {
	c, err := oneMoved(s.move(ctx, tx, transition{from: []Status{Authorized}, to: RequiresReview, set: reviewSet}, now,
		byID(id, attempt, ""), code.Sentence(), string(code)))
	if err != nil {
		return Charge{}, err
	}
	return c, s.checkHolds(ctx, tx, []Charge{c})
}

// checkHolds enqueues the hold checks of charges sent to review.
func (s *Store) checkHolds(ctx context.Context, tx pgx.Tx, cs []Charge) error {
	return s.enqueue(ctx, tx, each(cs, func(c Charge) river.JobArgs {
		return ReleaseHoldArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	}))
}

// RetryDiscardedHoldChecks has River run again, in tx, the hold checks it
// discarded while their hold was never released (DiscardedHoldChecks):
// the backstop for money left held. Returns their job ids.
func (s *Store) RetryDiscardedHoldChecks(ctx context.Context, tx pgx.Tx, now time.Time, quietFor time.Duration) ([]int64, error) {
	ids, err := DiscardedHoldChecks(ctx, tx, now, quietFor)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	q, err := s.queue(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := q.JobRetryTx(ctx, tx, id); err != nil {
			return nil, fmt.Errorf("run discarded hold check %d again: %w", id, err)
		}
	}
	return ids, nil
}

// PostingsToAnnul returns, up to limit, the registry postings the
// registry accepted whose hold will not be captured: its attempt was
// superseded, or its charge was voided, declined (a discounted hold
// voided at the deadline), or is in review or failed with its hold
// released.
func PostingsToAnnul(ctx context.Context, db DBTX, limit int) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT p.payment_id FROM registry_postings p JOIN charges c ON c.id = p.charge_id
		WHERE p.status = $1 AND (c.attempt_count > p.attempt OR c.status = ANY($2)
			OR (c.status = ANY($3) AND c.hold_released_at IS NOT NULL))
		ORDER BY p.payment_id LIMIT $4`, PostingAccepted,
		texts([]Status{Voided, Declined}), texts([]Status{RequiresReview, Failed}), limit)
	if err != nil {
		return nil, fmt.Errorf("postings to annul: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postings to annul: %w", err)
	}
	return ids, nil
}
