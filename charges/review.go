package charges

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rebill/rebill/rebilltype"
)

// ReviewCursor is a position in the review queue: a charge's OffPathAt
// (when it entered the queue's status) and id.
type ReviewCursor struct {
	At time.Time
	ID uuid.UUID
}

// ReviewCursorOf is the position of c, a charge of the review queue.
func ReviewCursorOf(c Charge) ReviewCursor {
	cur := ReviewCursor{ID: c.ID}
	if c.OffPathAt != nil {
		cur.At = *c.OffPathAt
	}
	return cur
}

// String encodes the cursor for an API response.
func (c ReviewCursor) String() string {
	return strconv.FormatInt(c.At.UnixMicro(), 10) + "|" + c.ID.String()
}

// ParseReviewCursor decodes ReviewCursor.String.
func ParseReviewCursor(s string) (ReviewCursor, error) {
	for i := 0; i < len(s); i++ {
		if s[i] != '|' {
			continue
		}
		micros, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return ReviewCursor{}, fmt.Errorf("bad review cursor: %w", err)
		}
		id, err := uuid.Parse(s[i+1:])
		if err != nil {
			return ReviewCursor{}, fmt.Errorf("bad review cursor: %w", err)
		}
		return ReviewCursor{At: time.UnixMicro(micros).UTC(), ID: id}, nil
	}
	return ReviewCursor{}, errors.New("bad review cursor")
}

// reviewQueue are the statuses support watches: automation is unsure or
// gave up.
var reviewQueue = []Status{Unknown, RequiresReview}

// inReviewSQL is the predicate of the review queue's partial index.
var inReviewSQL = statusInSQL("off_path_status", reviewQueue...)

// ReviewQueue returns charges in unknown or requires_review, the longest
// waiting first (by when they entered that status: a note on a charge in
// review does not send it to the back), after the cursor (nil for the
// start).
func ReviewQueue(ctx context.Context, db DBTX, after *ReviewCursor, limit int) ([]Charge, error) {
	var at *time.Time
	var id *uuid.UUID
	if after != nil {
		at, id = &after.At, &after.ID
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE `+inReviewSQL+`
		  AND ($1::timestamptz IS NULL OR (off_path_at, id) > ($1, $2))
		ORDER BY off_path_at, id LIMIT $3`, at, id, limit))
}

// holdChecked are the statuses whose hold a release job checks: in review,
// or resolved as failed by a person before the check ran.
var holdChecked = []Status{RequiresReview, Failed}

// recordHoldCheck notes on a charge in review (or resolved as failed from
// it) what its gateway showed, and whether no capture exists and no hold
// is left (released).
func recordHoldCheck(ctx context.Context, db DBTX, id uuid.UUID, attempt int, note string, released bool, now time.Time) error {
	_, err := db.Exec(ctx, `UPDATE charges SET review_reason = coalesce(review_reason, '') || ' (' || $3 || ')',
			hold_released_at = CASE WHEN $4 THEN $5::timestamptz ELSE hold_released_at END, updated_at = $5
		WHERE id = $1 AND attempt_count = $2 AND status = ANY($6)`, id, attempt, note, released, now, texts(holdChecked))
	if err != nil {
		return fmt.Errorf("record hold check: %w", err)
	}
	return nil
}

// Resolution is a person's verdict on a charge in review.
type Resolution struct {
	Outcome  Status // Succeeded or Failed
	Evidence string
	Actor    string
}

// maxEvidence bounds a resolution's evidence: a reference to the
// provider's record, not a document.
const maxEvidence = 2000

// Validate checks a resolution as a person sent it. Returns nil or
// rebilltype.Errors.
func (r Resolution) Validate() error {
	var errs rebilltype.Errors
	if r.Outcome != Succeeded && r.Outcome != Failed {
		errs.Add("outcome", "must be succeeded or failed")
	}
	if strings.TrimSpace(r.Evidence) == "" || utf8.RuneCountInString(r.Evidence) > maxEvidence {
		errs.Add("evidence", "is required: 1..%d characters naming the provider's record", maxEvidence)
	}
	return errs.Err()
}

// Resolve records a support decision on a charge in requires_review.
// Returns ErrNotFound, or a *fsm.TransitionError from any other status and for
// succeeded when rebill found no capture at the gateway and released the
// hold.
func (s *Store) Resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, r Resolution, now time.Time) (Charge, error) {
	t := transition{from: []Status{RequiresReview}, to: r.Outcome, event: EventResolved,
		set: `resolution = $1, resolution_evidence = $2, resolved_by = $3, resolved_at = $4`}
	if r.Outcome == Succeeded {
		t.where = "hold_released_at IS NULL"
	}
	c, err := oneMoved(s.move(ctx, tx, t, now, byID(id, 0, ""), string(r.Outcome), r.Evidence, r.Actor, now))
	if errors.Is(err, ErrStale) {
		current, gerr := Get(ctx, tx, id)
		if gerr != nil {
			return Charge{}, gerr
		}
		te := Machine.Refuse(current.Status, r.Outcome, "")
		if current.Status == RequiresReview && current.HoldReleasedAt != nil {
			te.Reason = "the gateway shows no capture and the hold was released: resolve it as failed, or retry it"
		}
		return Charge{}, te
	}
	return c, err
}

// CountInReview counts the review queue, for its gauge.
func CountInReview(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE `+inReviewSQL).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count review queue: %w", err)
	}
	return n, nil
}

// SweepDiscarded is the durable backstop of the dead-letter path: a charge
// whose current job River discarded (the rescuer gave up on a crashed
// last attempt, which no worker code sees) goes to review. It reads
// River's job table, the one place that records the discard, enqueues the
// check of each moved charge's hold in tx, and returns the charges.
func (s *Store) SweepDiscarded(ctx context.Context, tx pgx.Tx, now time.Time) ([]Charge, error) {
	from := []Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}
	found, err := tx.Query(ctx, `SELECT c.id, c.attempt_count
		FROM charges c JOIN river_job j
		  ON j.state = 'discarded'
		 AND j.kind IN ('charge_authorize', 'charge_capture', 'charge_void', 'charge_reconcile')
		 AND (j.args ->> 'charge_id')::uuid = c.id
		 AND (j.args ->> 'attempt')::int = c.attempt_count
		WHERE c.status = ANY($1)
		ORDER BY c.id
		FOR UPDATE OF c SKIP LOCKED`, texts(from))
	if err != nil {
		return nil, fmt.Errorf("sweep discarded jobs: %w", err)
	}
	var r rows
	var id uuid.UUID
	var attempt int32
	if _, err := pgx.ForEachRow(found, []any{&id, &attempt}, func() error {
		r.ids, r.attempts, r.notes = append(r.ids, id), append(r.attempts, attempt), append(r.notes, "")
		return nil
	}); err != nil {
		return nil, fmt.Errorf("sweep discarded jobs: %w", err)
	}
	if len(r.ids) == 0 {
		return nil, nil
	}
	moved, err := s.move(ctx, tx, transition{from: from, to: RequiresReview, set: reviewSet}, now, r, ReviewJobDiscarded.Sentence(), string(ReviewJobDiscarded))
	if err != nil {
		return nil, fmt.Errorf("sweep discarded jobs: %w", err)
	}
	return moved, s.checkHolds(ctx, tx, moved)
}

// DiscardedHoldChecks returns the hold checks (release_hold jobs) that
// River discarded while their charge's hold was never released: a check
// that crashed on every attempt, which no worker code sees. Nothing else
// would ever release such a hold, so the scan has River run them again.
// quietFor spaces those runs for a check that keeps crashing: it must
// have been discarded at least that long before now.
func DiscardedHoldChecks(ctx context.Context, tx pgx.Tx, now time.Time, quietFor time.Duration) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT j.id FROM river_job j JOIN charges c
		  ON c.id = (j.args ->> 'charge_id')::uuid AND c.attempt_count = (j.args ->> 'attempt')::int
		WHERE j.state = 'discarded' AND j.kind = $1 AND c.hold_released_at IS NULL
		  AND j.finalized_at <= $2
		FOR UPDATE OF j SKIP LOCKED`, ReleaseHoldArgs{}.Kind(), now.Add(-quietFor))
	if err != nil {
		return nil, fmt.Errorf("find discarded hold checks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("find discarded hold checks: %w", err)
	}
	return ids, nil
}
