package charges

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/internal/pg"
)

// DBTX is the one database handle every store takes (pg.DBTX), spelled
// short for this package's many signatures.
type DBTX = pg.DBTX

const columns = `id, coalesce(subscription_id, '00000000-0000-0000-0000-000000000000'), customer_id, period_key, period_start, amount, currency, gateway, status,
	attempt_count, coalesce(unknown_phase, ''), coalesce(authorization_ref, ''), void_requested, first_declined_at,
	next_attempt_at, coalesce(failure_code, ''), coalesce(review_reason, ''), created_at, updated_at, pm_token,
	attempt_due_at, attempt_times, hold_released_at, resolution IS NOT NULL,
	coalesce(enrollment_id, '00000000-0000-0000-0000-000000000000'), coalesce(full_amount, 0), discount_until,
	coalesce(registry_uin, ''), authorized_at, receipt, coalesce(max_amount, 0), coalesce(confirmed_amount, 0),
	confirmation_required, pay_until`

func scan(row pgx.Row) (Charge, error) {
	var c Charge
	err := row.Scan(&c.ID, &c.SubscriptionID, &c.CustomerID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency,
		&c.Gateway, &c.Status, &c.AttemptCount, &c.UnknownOp, &c.AuthorizationRef, &c.VoidRequested,
		&c.FirstDeclinedAt, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.CreatedAt, &c.UpdatedAt, &c.token,
		&c.AttemptDueAt, &c.AttemptTimes, &c.HoldReleasedAt, &c.Resolved,
		&c.EnrollmentID, &c.FullAmount, &c.DiscountUntil, &c.RegistryUIN, &c.AuthorizedAt, &c.receipt,
		&c.MaxAmount, &c.ConfirmedAmount, &c.ConfirmationRequired, &c.PayUntil)
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
	// Receipt is the fiscal receipt the charge's calls carry, as JSON in
	// the shape of gateway.Receipt; nil when none.
	Receipt []byte
}

// CreateMany inserts charges for due periods and returns those that did
// not exist yet. A period that already has a charge (a second scan, a
// second node) is skipped by the unique key, never charged twice.
func CreateMany(ctx context.Context, tx pgx.Tx, news []New, now time.Time) ([]Charge, error) {
	if len(news) == 0 {
		return nil, nil
	}
	args, err := createManyArgs(news, now)
	if err != nil {
		return nil, err
	}
	return collect(tx.Query(ctx, createManySQL, args...))
}

// QueueCreateMany is CreateMany queued on batch, for a caller that sends
// the charges with other writes in one round trip (a subscription and the
// charges of its periods due at once). created receives the charges when
// the batch has run.
func QueueCreateMany(batch *pgx.Batch, news []New, now time.Time, created func([]Charge)) error {
	if len(news) == 0 {
		return nil
	}
	args, err := createManyArgs(news, now)
	if err != nil {
		return err
	}
	batch.Queue(createManySQL, args...).Query(func(rows pgx.Rows) error {
		cs, err := collect(rows, nil)
		if err == nil {
			created(cs)
		}
		return err
	})
	return nil
}

const createManySQL = `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount,
		currency, gateway, pm_token, status, created_at, updated_at, attempt_due_at, attempt_times, receipt)
	SELECT id, sub, cust, key, start, amount, currency, gateway, token, $11, $10, $10, $10, ARRAY[$10::timestamptz],
		receipt::jsonb
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[], $8::text[],
		$9::text[], $12::text[]) AS t(id, sub, cust, key, start, amount, currency, gateway, token, receipt)
	ORDER BY start
	ON CONFLICT (subscription_id, period_key) DO NOTHING
	RETURNING ` + columns

// createManyArgs are the arguments of createManySQL: one array per column.
func createManyArgs(news []New, now time.Time) ([]any, error) {
	ids := make([][16]byte, len(news)) // binary uuid[]: no text round trip
	subs := make([][16]byte, len(news))
	customers := make([]string, len(news))
	keys := make([]string, len(news))
	starts := make([]time.Time, len(news))
	amounts := make([]int64, len(news))
	currencies := make([]string, len(news))
	gateways := make([]string, len(news))
	tokens := make([]string, len(news))
	receipts := make([]*string, len(news))
	for i, n := range news {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new charge id: %w", err)
		}
		ids[i], subs[i], customers[i], keys[i], starts[i] = id, n.SubscriptionID, n.CustomerID, n.PeriodKey, n.PeriodStart
		amounts[i], currencies[i], gateways[i], tokens[i] = n.Amount, n.Currency, n.Gateway, n.Token
		if n.Receipt != nil {
			receipts[i] = new(string(n.Receipt))
		}
	}
	return []any{ids, subs, customers, keys, starts, amounts, currencies, gateways, tokens, now, string(Scheduled), receipts}, nil
}

// move is the one guarded transition: it changes the charge only if its
// status is one of from (and, when attempt > 0, the attempt matches), and
// only along a move that CanTransition allows. set holds extra assignments
// whose parameters start at $1. Leaving for any status but declined clears
// next_attempt_at. Returns ErrStale when the guard fails.
func move(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time, set string, args ...any) (Charge, error) {
	return guardedUpdate(ctx, db, id, attempt, from, to, "", now, "", set, args...)
}

// guardedUpdate is move with an event type to publish instead of the one
// named after to ("" for that), and a condition on the row. It publishes
// the change's event in db, the transaction of the move.
func guardedUpdate(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, event string, now time.Time,
	where, set string, args ...any) (Charge, error) {
	if err := allowed(from, to); err != nil {
		return Charge{}, err
	}
	c, err := update(ctx, db, id, attempt, from, to, now, where, set, args...)
	if err != nil {
		return Charge{}, err
	}
	if err := publish(ctx, db, event, c, now); err != nil {
		return Charge{}, err
	}
	return c, nil
}

// allowed checks every move from one of from to to against the table.
func allowed(from []Status, to Status) error {
	for _, f := range from {
		if f != to && !CanTransition(f, to) {
			return Machine.Refuse(f, to, "")
		}
	}
	return nil
}

// update is the guarded UPDATE of a move the caller checked: it moves the
// charge to to only from one of from, for attempt (0: any), and where
// holds; ErrStale when it does not.
func update(ctx context.Context, db DBTX, id uuid.UUID, attempt int, from []Status, to Status, now time.Time,
	where, set string, args ...any) (Charge, error) {
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

// inFlightSQL is the predicate of the partial index charges_open_idx,
// written out from the constants so that the planner can use that index.
var inFlightSQL = "status IN ('" + strings.Join(texts([]Status{Scheduled, Authorizing, Authorized, Capturing, Unknown}), "', '") + "')"

// settledSQL is the predicate of the partial index charges_settled_idx.
var settledSQL = "status IN ('" + strings.Join(texts([]Status{Succeeded, Failed, Voided, Declined}), "', '") + "')"

// AnyInFlight reports whether the pipeline is still working on a charge,
// for a benchmark waiting for them all to settle: it stops at the first one
// the partial index of open charges names, so a poll costs little however
// many charges there are.
func AnyInFlight(ctx context.Context, db DBTX) (bool, error) {
	var found bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM charges WHERE `+inFlightSQL+`)`).Scan(&found); err != nil {
		return false, fmt.Errorf("look for charges in flight: %w", err)
	}
	return found, nil
}

// LastSettled is when the last charge was settled (zero: none was), read
// from the settled charges' index: a benchmark's end, to the microsecond,
// however seldom it polls.
func LastSettled(ctx context.Context, db DBTX) (time.Time, error) {
	var at *time.Time
	if err := db.QueryRow(ctx, `SELECT max(updated_at) FROM charges WHERE `+settledSQL).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read the last settlement: %w", err)
	}
	if at == nil {
		return time.Time{}, nil
	}
	return *at, nil
}

// CountByStatus counts the charges in status, for benchmarks and reports.
func CountByStatus(ctx context.Context, db DBTX, status Status) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE status = $1`, string(status)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s charges: %w", status, err)
	}
	return n, nil
}
