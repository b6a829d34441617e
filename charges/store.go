package charges

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the store needs of a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const columns = `id, subscription_id, customer_id, period_key, period_start, amount, currency, gateway, status,
	attempt_count, coalesce(unknown_phase, ''), coalesce(authorization_ref, ''), void_requested, first_declined_at,
	next_attempt_at, coalesce(failure_code, ''), coalesce(review_reason, ''), created_at, updated_at, pm_token`

func scan(row pgx.Row) (Charge, error) {
	var c Charge
	err := row.Scan(&c.ID, &c.SubscriptionID, &c.CustomerID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency,
		&c.Gateway, &c.Status, &c.AttemptCount, &c.UnknownPhase, &c.AuthorizationRef, &c.VoidRequested,
		&c.FirstDeclinedAt, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.CreatedAt, &c.UpdatedAt, &c.token)
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

// ReviewQueue returns charges in unknown or requires_review, the longest
// waiting first, after the cursor (nil for the start).
func ReviewQueue(ctx context.Context, db DBTX, after *ReviewCursor, limit int) ([]Charge, error) {
	var at *time.Time
	var id *uuid.UUID
	if after != nil {
		at, id = &after.UpdatedAt, &after.ID
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE status IN ('unknown', 'requires_review')
		  AND ($1::timestamptz IS NULL OR (updated_at, id) > ($1, $2))
		ORDER BY updated_at, id LIMIT $3`, at, id, limit))
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
			currency, gateway, pm_token, status, created_at, updated_at)
		SELECT id, sub, cust, key, start, amount, currency, gateway, token, 'scheduled', $10, $10
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[], $8::text[],
			$9::text[]) AS t(id, sub, cust, key, start, amount, currency, gateway, token)
		ORDER BY start
		ON CONFLICT (subscription_id, period_key) DO NOTHING
		RETURNING `+columns, ids, subs, customers, keys, starts, amounts, currencies, gateways, tokens, now))
}

// move is the one guarded transition: it changes the charge only if its
// status is one of from (and, when attempt > 0, the attempt matches).
// Returns ErrStale when the guard fails.
func move(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time, set string, args ...any) (Charge, error) {
	return guardedUpdate(ctx, db, id, attempt, from, to, now, "", set, args...)
}

// moveWhere is move with one more condition on the row.
func moveWhere(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time, where string) (Charge, error) {
	return guardedUpdate(ctx, db, id, attempt, from, to, now, where, "")
}

func guardedUpdate(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time,
	where, set string, args ...any) (Charge, error) {
	fromText := make([]string, len(from))
	for i, s := range from {
		fromText[i] = string(s)
	}
	n := len(args)
	query := fmt.Sprintf(`UPDATE charges SET status = $%d, updated_at = $%d`, n+1, n+2)
	if set != "" {
		query += ", " + set
	}
	query += fmt.Sprintf(` WHERE id = $%d AND status = ANY($%d) AND ($%d = 0 OR attempt_count = $%d)`, n+3, n+4, n+5, n+5)
	if where != "" {
		query += " AND " + where
	}
	c, err := scan(db.QueryRow(ctx, query+` RETURNING `+columns, append(args, to, now, id, fromText, attempt)...))
	if errors.Is(err, ErrNotFound) {
		return Charge{}, ErrStale
	}
	if err != nil {
		return Charge{}, fmt.Errorf("move charge to %s: %w", to, err)
	}
	return c, nil
}

// DueRetries starts the next dunning attempt of every declined charge
// whose retry time has come: a new attempt number (so a new gateway key),
// status scheduled. The caller enqueues their authorize jobs in tx.
func DueRetries(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Charge, error) {
	return collect(tx.Query(ctx, `UPDATE charges SET status = 'scheduled', attempt_count = attempt_count + 1,
			next_attempt_at = NULL, updated_at = $1
		WHERE id IN (SELECT id FROM charges WHERE status = 'declined' AND next_attempt_at <= $1
			ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING `+columns, now, limit))
}

// RetryWithNewMethod starts a new attempt, at once, of the subscription's
// declined or failed charges, with the new payment method. The
// caller enqueues their authorize jobs in tx.
func RetryWithNewMethod(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, gateway, token string, now time.Time) ([]Charge, error) {
	return collect(tx.Query(ctx, `UPDATE charges SET status = 'scheduled', attempt_count = attempt_count + 1,
			next_attempt_at = NULL, gateway = $2, pm_token = $3, failure_code = NULL, updated_at = $4
		WHERE subscription_id = $1 AND status IN ('declined', 'failed') AND resolution IS NULL
		RETURNING `+columns, subscriptionID, gateway, token, now))
}

// RequestVoid flags the subscription's charges that have not been captured
// so that no capture starts, and returns those already holding money (the
// caller enqueues their void jobs). Charges not yet authorized become
// voided at once: no hold exists to release.
func RequestVoid(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, now time.Time) ([]Charge, error) {
	if _, err := tx.Exec(ctx, `UPDATE charges SET status = 'voided', failure_code = 'subscription_cancelled',
			next_attempt_at = NULL, updated_at = $2
		WHERE subscription_id = $1 AND (status = 'scheduled' OR status = 'declined')`, subscriptionID, now); err != nil {
		return nil, fmt.Errorf("void unstarted charges: %w", err)
	}
	return collect(tx.Query(ctx, `UPDATE charges SET void_requested = true, updated_at = $2
		WHERE subscription_id = $1 AND status IN ('authorizing', 'authorized', 'unknown') AND NOT void_requested
		RETURNING `+columns, subscriptionID, now))
}

// Resolution is a person's verdict on a charge in review.
type Resolution struct {
	Outcome  Status // Succeeded or Failed
	Evidence string
	Actor    string
}

// Resolve records a support decision on a charge in requires_review.
// Returns ErrNotFound, or a *TransitionError from any other status.
func Resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, r Resolution, now time.Time) (Charge, error) {
	c, err := move(ctx, tx, id, 0, []Status{RequiresReview}, r.Outcome, now,
		`resolution = $1, resolution_evidence = $2, resolved_by = $3, resolved_at = $4`,
		string(r.Outcome), r.Evidence, r.Actor, now)
	if errors.Is(err, ErrStale) {
		current, gerr := Get(ctx, tx, id)
		if gerr != nil {
			return Charge{}, gerr
		}
		return Charge{}, &TransitionError{From: current.Status, To: r.Outcome}
	}
	return c, err
}

// CountInReview counts the review queue, for its gauge.
func CountInReview(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE status IN ('unknown', 'requires_review')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count review queue: %w", err)
	}
	return n, nil
}
