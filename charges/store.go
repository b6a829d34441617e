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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rebill/rebill/internal/validate"
)

// DBTX is what the store needs of a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const columns = `id, subscription_id, customer_id, period_key, period_start, amount, currency, gateway, status,
	attempt_count, coalesce(unknown_phase, ''), coalesce(authorization_ref, ''), void_requested, first_declined_at,
	next_attempt_at, coalesce(failure_code, ''), coalesce(review_reason, ''), created_at, updated_at, pm_token,
	attempt_due_at, attempt_times, hold_released_at, resolution IS NOT NULL`

func scan(row pgx.Row) (Charge, error) {
	var c Charge
	err := row.Scan(&c.ID, &c.SubscriptionID, &c.CustomerID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency,
		&c.Gateway, &c.Status, &c.AttemptCount, &c.UnknownOp, &c.AuthorizationRef, &c.VoidRequested,
		&c.FirstDeclinedAt, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.CreatedAt, &c.UpdatedAt, &c.token,
		&c.AttemptDueAt, &c.AttemptTimes, &c.HoldReleasedAt, &c.Resolved)
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, ErrNotFound
	}
	if err != nil {
		return Charge{}, fmt.Errorf("scan charge: %w", err)
	}
	c.PeriodStart = c.PeriodStart.UTC()
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	return c, nil
}

func collect(rows pgx.Rows, err error) ([]Charge, error) {
	if err != nil {
		return nil, fmt.Errorf("query charges: %w", err)
	}
	defer rows.Close()
	var out []Charge
	for rows.Next() {
		c, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query charges: %w", err)
	}
	return out, nil
}

// Get returns one charge. Returns ErrNotFound.
func Get(ctx context.Context, db DBTX, id uuid.UUID) (Charge, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM charges WHERE id = $1`, id))
}

// ListBySubscription returns a subscription's charges newest first, before
// the keyset cursor id (uuid.Nil for the first page).
func ListBySubscription(ctx context.Context, db DBTX, subscriptionID, before uuid.UUID, limit int) ([]Charge, error) {
	var cursor *uuid.UUID
	if before != uuid.Nil {
		cursor = &before
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE subscription_id = $1 AND ($2::uuid IS NULL OR id < $2) ORDER BY id DESC LIMIT $3`, subscriptionID, cursor, limit))
}

// ReviewCursor is a position in the review queue.
type ReviewCursor struct {
	UpdatedAt time.Time
	ID        uuid.UUID
}

// String encodes the cursor for an API response.
func (c ReviewCursor) String() string {
	return strconv.FormatInt(c.UpdatedAt.UnixMicro(), 10) + "|" + c.ID.String()
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
		return ReviewCursor{UpdatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
	}
	return ReviewCursor{}, errors.New("bad review cursor")
}

// reviewQueue are the statuses support watches: automation is unsure or
// gave up.
var reviewQueue = []Status{Unknown, RequiresReview}

// ReviewQueue returns charges in unknown or requires_review, the longest
// waiting first, after the cursor (nil for the start).
func ReviewQueue(ctx context.Context, db DBTX, after *ReviewCursor, limit int) ([]Charge, error) {
	var at *time.Time
	var id *uuid.UUID
	if after != nil {
		at, id = &after.UpdatedAt, &after.ID
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE status = ANY($4)
		  AND ($1::timestamptz IS NULL OR (updated_at, id) > ($1, $2))
		ORDER BY updated_at, id LIMIT $3`, at, id, limit, texts(reviewQueue)))
}

func texts(statuses []Status) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// New is a charge to create for a due period.
type New struct {
	SubscriptionID uuid.UUID
	CustomerID     string
	PeriodKey      string
	PeriodStart    time.Time
	Amount         int64
	Currency       string
	Gateway        string
	Token          string
}

// CreateMany inserts charges for due periods and returns those that did
// not exist yet. A period that already has a charge (a second scan, a
// second node) is skipped by the unique key, never charged twice.
func CreateMany(ctx context.Context, tx pgx.Tx, news []New, now time.Time) ([]Charge, error) {
	if len(news) == 0 {
		return nil, nil
	}
	ids := make([][16]byte, len(news)) // binary uuid[]: no text round trip
	subs := make([][16]byte, len(news))
	customers := make([]string, len(news))
	keys := make([]string, len(news))
	starts := make([]time.Time, len(news))
	amounts := make([]int64, len(news))
	currencies := make([]string, len(news))
	gateways := make([]string, len(news))
	tokens := make([]string, len(news))
	for i, n := range news {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new charge id: %w", err)
		}
		ids[i], subs[i], customers[i], keys[i], starts[i] = id, n.SubscriptionID, n.CustomerID, n.PeriodKey, n.PeriodStart
		amounts[i], currencies[i], gateways[i], tokens[i] = n.Amount, n.Currency, n.Gateway, n.Token
	}
	return collect(tx.Query(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount,
			currency, gateway, pm_token, status, created_at, updated_at, attempt_due_at, attempt_times)
		SELECT id, sub, cust, key, start, amount, currency, gateway, token, $11, $10, $10, $10, ARRAY[$10::timestamptz]
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[], $8::text[],
			$9::text[]) AS t(id, sub, cust, key, start, amount, currency, gateway, token)
		ORDER BY start
		ON CONFLICT (subscription_id, period_key) DO NOTHING
		RETURNING `+columns, ids, subs, customers, keys, starts, amounts, currencies, gateways, tokens, now, string(Scheduled)))
}

// move is the one guarded transition: it changes the charge only if its
// status is one of from (and, when attempt > 0, the attempt matches), and
// only along a move that CanTransition allows. set holds extra assignments
// whose parameters start at $1. Leaving for any status but declined clears
// next_attempt_at. Returns ErrStale when the guard fails.
func move(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time, set string, args ...any) (Charge, error) {
	return guardedUpdate(ctx, db, id, attempt, from, to, now, "", set, args...)
}

// moveWhere is move with one more condition on the row.
func moveWhere(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time, where string) (Charge, error) {
	return guardedUpdate(ctx, db, id, attempt, from, to, now, where, "")
}

func guardedUpdate(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time,
	where, set string, args ...any) (Charge, error) {
	for _, f := range from {
		if f != to && !CanTransition(f, to) {
			return Charge{}, &TransitionError{From: f, To: to}
		}
	}
	n := len(args)
	query := fmt.Sprintf(`UPDATE charges SET status = $%d, updated_at = $%d`, n+1, n+2)
	if to != Declined {
		query += ", next_attempt_at = NULL"
	}
	if set != "" {
		query += ", " + set
	}
	query += fmt.Sprintf(` WHERE id = $%d AND status = ANY($%d) AND ($%d = 0 OR attempt_count = $%d)`, n+3, n+4, n+5, n+5)
	if where != "" {
		query += " AND " + where
	}
	c, err := scan(db.QueryRow(ctx, query+` RETURNING `+columns, append(args, to, now, id, texts(from), attempt)...))
	if errors.Is(err, ErrNotFound) {
		return Charge{}, ErrStale
	}
	if err != nil {
		return Charge{}, fmt.Errorf("move charge to %s: %w", to, err)
	}
	return c, nil
}

// newAttempt is the assignment list that starts the next business attempt
// of a charge: a new attempt number (so new gateway keys), due at $1.
const newAttempt = `attempt_count = attempt_count + 1, attempt_due_at = $1,
	attempt_times = attempt_times || $2::timestamptz, unknown_phase = NULL, authorization_ref = NULL`

// DueRetries starts the next dunning attempt of every declined charge
// whose retry time has come: a new attempt number (so a new gateway key),
// status scheduled. The caller enqueues their authorize jobs in tx.
func DueRetries(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Charge, error) {
	if !CanTransition(Declined, Scheduled) {
		return nil, &TransitionError{From: Declined, To: Scheduled}
	}
	return collect(tx.Query(ctx, `UPDATE charges SET status = $3, attempt_count = attempt_count + 1,
			attempt_due_at = next_attempt_at, attempt_times = attempt_times || $1::timestamptz,
			next_attempt_at = NULL, unknown_phase = NULL, authorization_ref = NULL, updated_at = $1
		WHERE id IN (SELECT id FROM charges WHERE status = $4 AND next_attempt_at <= $1
			ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING `+columns, now, limit, string(Scheduled), string(Declined)))
}

// Card-network rules on retrying one card: at most SameCardAttempts
// attempts of a charge in SameCardWindow, and none after the issuer said
// the card is lost or stolen.
const (
	SameCardAttempts = 15
	SameCardWindow   = 30 * 24 * time.Hour
)

// lostOrStolen are decline codes after which the same card is never tried
// again.
var lostOrStolen = map[string]bool{"lost_card": true, "stolen_card": true, "pickup_card": true}

// ErrRetryRefused: a retry on the same card is not allowed (card-network
// rules); the wrapped message says which.
var ErrRetryRefused = errors.New("retry refused")

// sameCardRetryAllowed applies the card-network rules to a new attempt of
// c with token at now.
func (c Charge) sameCardRetryAllowed(token string, now time.Time) error {
	if token != c.token {
		return nil
	}
	if lostOrStolen[c.FailureCode] {
		return fmt.Errorf("%w: the issuer reported this card %s; send a different card", ErrRetryRefused, c.FailureCode)
	}
	recent := 0
	for _, at := range c.AttemptTimes {
		if now.Sub(at) < SameCardWindow {
			recent++
		}
	}
	if recent >= SameCardAttempts {
		return fmt.Errorf("%w: %d attempts on this card in %s; send a different card", ErrRetryRefused, recent, SameCardWindow)
	}
	return nil
}

// PaymentMethodChanged applies a new (or the same) payment method to the
// subscription's charges, in tx after the subscription row was locked:
// charges whose attempt has not begun take the new card, and charges that
// wait (declined, failed and unresolved) start a new attempt at once with
// it, oldest first, returned for the caller to enqueue. Attempts in flight
// keep their card and finish first: a second attempt beside them could
// place a second hold. Returns an error wrapping ErrRetryRefused, and
// changes nothing, when the same card may not be tried again.
func PaymentMethodChanged(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, gateway, token string, now time.Time) ([]Charge, error) {
	waiting, err := collect(tx.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE subscription_id = $1 AND (status = $2 OR (status = $3 AND resolution IS NULL))
		ORDER BY period_start FOR UPDATE`, subscriptionID, string(Declined), string(Failed)))
	if err != nil {
		return nil, err
	}
	for _, c := range waiting {
		if err := c.sameCardRetryAllowed(token, now); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE charges SET gateway = $2, pm_token = $3, updated_at = $4
		WHERE subscription_id = $1 AND status = $5`, subscriptionID, gateway, token, now, string(Scheduled)); err != nil {
		return nil, fmt.Errorf("new card for scheduled charges: %w", err)
	}
	retried := make([]Charge, 0, len(waiting))
	for _, c := range waiting {
		next, err := move(ctx, tx, c.ID, c.AttemptCount, []Status{c.Status}, Scheduled, now,
			newAttempt+`, gateway = $3, pm_token = $4, failure_code = NULL, first_declined_at = NULL`,
			now, now, gateway, token)
		if err != nil {
			return nil, err
		}
		retried = append(retried, next)
	}
	return retried, nil
}

// RetryFromReview starts a new attempt of a charge in requires_review or
// failed, at a person's request, on the given payment method. The caller
// has checked at the gateway that the previous attempt holds no money.
// Returns ErrStale when the charge moved on meanwhile, a *TransitionError
// from any other status, or ErrRetryRefused under card-network rules.
func RetryFromReview(ctx context.Context, tx pgx.Tx, c Charge, gateway, token string, now time.Time) (Charge, error) {
	if c.Status != RequiresReview && c.Status != Failed {
		return Charge{}, &TransitionError{From: c.Status, To: Scheduled}
	}
	if err := c.sameCardRetryAllowed(token, now); err != nil {
		return Charge{}, err
	}
	return move(ctx, tx, c.ID, c.AttemptCount, []Status{RequiresReview, Failed}, Scheduled, now,
		newAttempt+`, gateway = $3, pm_token = $4, failure_code = NULL, first_declined_at = NULL, review_reason = NULL,
			hold_released_at = NULL, void_requested = false`, now, now, gateway, token)
}

// RequestVoid flags the subscription's charges that have not been captured
// so that no capture starts, and returns those already holding money (the
// caller enqueues their void jobs). Charges not yet authorized become
// voided at once: no hold exists to release.
func RequestVoid(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time) ([]Charge, error) {
	if _, err := voidWaiting(ctx, tx, subscriptionID, now, "subscription_cancelled", time.Time{}); err != nil {
		return nil, err
	}
	return collect(tx.Query(ctx, `UPDATE charges SET void_requested = true, updated_at = $2
		WHERE subscription_id = $1 AND status = ANY($3) AND NOT void_requested
		RETURNING `+columns, subscriptionID, now, texts([]Status{Authorizing, Authorized, Unknown})))
}

// voidWaiting voids the subscription's charges that no attempt is working
// on (scheduled or declined) whose period started at or after since.
func voidWaiting(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time, code string, since time.Time) (int64, error) {
	for _, from := range []Status{Scheduled, Declined} {
		if !CanTransition(from, Voided) {
			return 0, &TransitionError{From: from, To: Voided}
		}
	}
	tag, err := tx.Exec(ctx, `UPDATE charges SET status = $5, failure_code = $3, next_attempt_at = NULL, updated_at = $2
		WHERE subscription_id = $1 AND status = ANY($6) AND period_start >= $4`,
		subscriptionID, now, code, since, string(Voided), texts([]Status{Scheduled, Declined}))
	if err != nil {
		return 0, fmt.Errorf("void waiting charges: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DunningEnded applies the end of a subscription's dunning (it became
// unpaid at dunningEnd) to its other charges: those of periods that began
// at or after that moment are not owed and are voided; declined ones of
// earlier periods stop retrying (failed: a payment-method change retries
// them). Attempts in flight finish.
func DunningEnded(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, dunningEnd, now time.Time) error {
	if _, err := voidWaiting(ctx, tx, subscriptionID, now, "subscription_unpaid", dunningEnd); err != nil {
		return err
	}
	if !CanTransition(Declined, Failed) {
		return &TransitionError{From: Declined, To: Failed}
	}
	if _, err := tx.Exec(ctx, `UPDATE charges SET status = $3, next_attempt_at = NULL, updated_at = $2
		WHERE subscription_id = $1 AND status = $4`, subscriptionID, now, string(Failed), string(Declined)); err != nil {
		return fmt.Errorf("stop dunning: %w", err)
	}
	return nil
}

// HasUnpaid reports whether the subscription has a charge other than
// except that is owed and not collected: declined, or failed and not
// settled by a person.
func HasUnpaid(ctx context.Context, db DBTX, subscriptionID, except uuid.UUID) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE subscription_id = $1 AND id <> $2
		AND (status = $3 OR (status = $4 AND resolution IS NULL)))`,
		subscriptionID, except, string(Declined), string(Failed)).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for unpaid charges: %w", err)
	}
	return found, nil
}

// HasOpen reports whether the subscription has a charge that automation is
// still working on or waiting to retry.
func HasOpen(ctx context.Context, db DBTX, subscriptionID uuid.UUID) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE subscription_id = $1 AND status = ANY($2))`,
		subscriptionID, texts(open)).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for open charges: %w", err)
	}
	return found, nil
}

// markWaiting records, without changing the status, that the charge's
// current step waits for its gateway until at, and why.
func markWaiting(ctx context.Context, db DBTX, id uuid.UUID, attempt int, status Status, at time.Time, reason string, now time.Time) error {
	_, err := db.Exec(ctx, `UPDATE charges SET next_attempt_at = $4, failure_code = $5, updated_at = $6
		WHERE id = $1 AND attempt_count = $2 AND status = $3`, id, attempt, string(status), at, reason, now)
	if err != nil {
		return fmt.Errorf("mark charge waiting: %w", err)
	}
	return nil
}

// recordHoldCheck notes on a charge in review what its gateway showed, and
// whether no capture exists and no hold is left (released).
func recordHoldCheck(ctx context.Context, db DBTX, id uuid.UUID, attempt int, note string, released bool, now time.Time) error {
	_, err := db.Exec(ctx, `UPDATE charges SET review_reason = coalesce(review_reason, '') || ' (' || $3 || ')',
			hold_released_at = CASE WHEN $4 THEN $5::timestamptz ELSE hold_released_at END, updated_at = $5
		WHERE id = $1 AND attempt_count = $2 AND status = $6`, id, attempt, note, released, now, string(RequiresReview))
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
// validate.Errors.
func (r Resolution) Validate() error {
	var errs validate.Errors
	if r.Outcome != Succeeded && r.Outcome != Failed {
		errs.Add("outcome", "must be succeeded or failed")
	}
	if strings.TrimSpace(r.Evidence) == "" || utf8.RuneCountInString(r.Evidence) > maxEvidence {
		errs.Add("evidence", "is required: 1..%d characters naming the provider's record", maxEvidence)
	}
	return errs.Err()
}

// Resolve records a support decision on a charge in requires_review.
// Returns ErrNotFound, or a *TransitionError from any other status and for
// succeeded when rebill found no capture at the gateway and released the
// hold.
func Resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, r Resolution, now time.Time) (Charge, error) {
	where := ""
	if r.Outcome == Succeeded {
		where = "hold_released_at IS NULL"
	}
	c, err := guardedUpdate(ctx, tx, id, 0, []Status{RequiresReview}, r.Outcome, now, where,
		`resolution = $1, resolution_evidence = $2, resolved_by = $3, resolved_at = $4`,
		string(r.Outcome), r.Evidence, r.Actor, now)
	if errors.Is(err, ErrStale) {
		current, gerr := Get(ctx, tx, id)
		if gerr != nil {
			return Charge{}, gerr
		}
		te := &TransitionError{From: current.Status, To: r.Outcome}
		if current.Status == RequiresReview && current.HoldReleasedAt != nil {
			te.Reason = "the gateway shows no capture and the hold was released: resolve it as failed, or retry it"
		}
		return Charge{}, te
	}
	return c, err
}

// CountByStatus counts the charges in status, for benchmarks and reports.
func CountByStatus(ctx context.Context, db DBTX, status Status) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE status = $1`, string(status)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s charges: %w", status, err)
	}
	return n, nil
}

// CountInReview counts the review queue, for its gauge.
func CountInReview(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE status = ANY($1)`, texts(reviewQueue)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count review queue: %w", err)
	}
	return n, nil
}

// SweepDiscarded is the durable backstop of the dead-letter path: a charge
// whose current job River discarded (the rescuer gave up on a crashed
// last attempt, which no worker code sees) goes to review. It reads
// River's job table, the one place that records the discard, and returns
// the charges it moved (the caller has their holds checked).
func SweepDiscarded(ctx context.Context, tx pgx.Tx, now time.Time) ([]Charge, error) {
	from := []Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}
	for _, f := range from {
		if !CanTransition(f, RequiresReview) {
			return nil, &TransitionError{From: f, To: RequiresReview}
		}
	}
	moved, err := collect(tx.Query(ctx, `WITH swept AS (
			SELECT c.id AS charge_id, j.kind AS job_kind FROM charges c JOIN river_job j
			  ON j.state = 'discarded'
			 AND j.kind IN ('charge_authorize', 'charge_capture', 'charge_void', 'charge_reconcile')
			 AND (j.args ->> 'charge_id')::uuid = c.id
			 AND (j.args ->> 'attempt')::int = c.attempt_count
			WHERE c.status = ANY($2)
			FOR UPDATE OF c SKIP LOCKED
		)
		UPDATE charges SET status = $3, updated_at = $1, next_attempt_at = NULL,
			review_reason = 'River discarded the ' || swept.job_kind || ' job after its last attempt'
		FROM swept WHERE charges.id = swept.charge_id
		RETURNING `+columns, now, texts(from), string(RequiresReview)))
	if err != nil {
		return nil, fmt.Errorf("sweep discarded jobs: %w", err)
	}
	return moved, nil
}
