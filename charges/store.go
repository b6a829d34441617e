package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pg"
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
	confirmation_required, pay_until, paid_outside, coalesce(outside_checked_attempt, 0), outside_recheck, experiments::text,
	off_path_at, source_paid, coalesce(review_code, ''), amount_refunded`

func scan(row pgx.Row) (Charge, error) {
	return scanRow(row, false)
}

// scanRow scans a row of columns, followed by the sealed token when
// sealed (NULL: none).
func scanRow(row pgx.Row, sealed bool) (Charge, error) {
	var c Charge
	var token *string
	dest := []any{&c.ID, &c.SubscriptionID, &c.CustomerID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency,
		&c.Gateway, &c.Status, &c.AttemptCount, &c.UnknownOp, &c.AuthorizationRef, &c.VoidRequested,
		&c.FirstDeclinedAt, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.CreatedAt, &c.UpdatedAt, &c.token,
		&c.AttemptDueAt, &c.AttemptTimes, &c.HoldReleasedAt, &c.Resolved,
		&c.EnrollmentID, &c.FullAmount, &c.DiscountUntil, &c.RegistryUIN, &c.AuthorizedAt, &c.receipt,
		&c.MaxAmount, &c.ConfirmedAmount, &c.ConfirmationRequired, &c.PayUntil, &c.PaidOutside, &c.outsideChecked, &c.outsideRecheck, &c.experiments,
		&c.OffPathAt, &c.SourcePaid, &c.ReviewCode, &c.AmountRefunded}
	if sealed {
		dest = append(dest, &token)
	}
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, ErrNotFound
	}
	if err != nil {
		return Charge{}, fmt.Errorf("scan charge: %w", err)
	}
	c.PeriodStart = c.PeriodStart.UTC()
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	if token != nil {
		c.sealed = *token
	}
	return c, nil
}

func collect(rows pgx.Rows, err error) ([]Charge, error) {
	return collectRows(rows, err, false)
}

// collectRows collects rows scanned by scanRow.
func collectRows(rows pgx.Rows, err error, sealed bool) ([]Charge, error) {
	if err != nil {
		return nil, fmt.Errorf("query charges: %w", err)
	}
	defer rows.Close()
	var out []Charge
	for rows.Next() {
		c, err := scanRow(rows, sealed)
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
	// Experiments are the experiment arms that govern the charge's
	// policies, by experiment key (its subscription's record).
	Experiments map[string]string
}

// Create inserts the charges of due periods and enqueues, in tx, the
// authorize job of each it created, and returns those: a charge never
// exists without the job that moves it. A period that already has a
// charge (a second scan, a second node) is skipped by the unique key,
// never charged twice, and gets no second job.
func (s *Store) Create(ctx context.Context, tx pgx.Tx, news []New, now time.Time) ([]Charge, error) {
	if len(news) == 0 {
		return nil, nil
	}
	args, err := createManyArgs(news, now)
	if err != nil {
		return nil, err
	}
	created, err := collect(tx.Query(ctx, createManySQL, args...))
	if err != nil {
		return nil, err
	}
	return created, s.start(ctx, tx, created)
}

// CreateBatched is Create for a caller whose own writes go in the same
// round trip as the charges (a subscription and the charges of its
// periods due at once): the insert is queued on batch after what the
// caller queued there, batch is sent, and the jobs follow in tx. An error
// of any statement on batch is returned.
func (s *Store) CreateBatched(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, news []New, now time.Time) ([]Charge, error) {
	var created []Charge
	if len(news) > 0 {
		args, err := createManyArgs(news, now)
		if err != nil {
			return nil, err
		}
		batch.Queue(createManySQL, args...).Query(func(rows pgx.Rows) error {
			cs, err := collect(rows, nil)
			created = cs
			return err
		})
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return created, s.start(ctx, tx, created)
}

const createManySQL = `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount,
		currency, gateway, pm_token, status, created_at, updated_at, attempt_due_at, attempt_times, receipt, experiments)
	SELECT id, sub, cust, key, start, amount, currency, gateway, token, $11, $10, $10, $10, ARRAY[$10::timestamptz],
		receipt::jsonb, exps::jsonb
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[], $8::text[],
		$9::text[], $12::text[], $13::text[]) AS t(id, sub, cust, key, start, amount, currency, gateway, token, receipt, exps)
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
	records := make([]string, len(news))
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
		records[i] = "{}"
		if len(n.Experiments) > 0 {
			b, err := json.Marshal(n.Experiments)
			if err != nil {
				return nil, fmt.Errorf("encode experiments of a charge of subscription %s: %w", n.SubscriptionID, err)
			}
			records[i] = string(b)
		}
	}
	return []any{ids, subs, customers, keys, starts, amounts, currencies, gateways, tokens, now, string(Scheduled), receipts, records}, nil
}

// Store is the one writer of a charge's status: every statement that
// changes charges.status is built by move, from a transition the machine
// allowed ([Machine] and its MoveOrStay) and guarded by the statuses it
// leaves, and publishes its events in the transaction that makes it. One
// charge's move and a batch's are the same statement over one row or
// many, so the pipeline's group-committed hot path keeps every guard of
// the single move. The zero Store, and a nil one, publish nothing.
type Store struct {
	// Events receives every published change, in the transaction that
	// makes it; nil publishes none.
	Events EventSink
	// Queue enqueues the jobs the store's verbs start, in the caller's
	// transaction; nil: the River client of the job that runs the verb.
	Queue Queue
}

// transition is one guarded move of charges: from one of from to to (as
// the machine allows it: Machine.MoveOrStay), publishing
// event instead of the event named after to ("" for that). where is a
// condition the row must meet besides its status, set the assignments
// besides the status; both may use the statement's arguments from $1, and
// a row picked by id its note as b.bnote. Leaving for any status but
// declined clears next_attempt_at. sealed, when set, is an expression over
// the moved row returned with it as the charge's sealed token.
type transition struct {
	from   []Status
	to     Status
	event  string
	where  string
	set    string
	sealed string
}

// rows are the charges a move applies to: by id, each with its attempt
// (0: any) and a note the move's assignments may use (b.bnote); or, when
// selector is set, those that meet it.
type rows struct {
	ids      []uuid.UUID
	attempts []int32
	notes    []string
	selector string
}

// byID are the rows of one charge's move.
func byID(id uuid.UUID, attempt int, note string) rows {
	return rows{ids: []uuid.UUID{id}, attempts: []int32{int32(attempt)}, notes: []string{note}}
}

// move is the one guarded move of charges, and the only statement that
// writes charges.status: it runs t on r (one charge byID, those matching a
// condition, or a batch) at now as one guarded UPDATE, once the machine
// allowed t (Machine.MoveOrStay), and publishes, in db, the event of every
// charge it moved (first as the status it passed through, if any). It
// returns the moved charges; one that the guard held back is not among
// them.
func (s *Store) move(ctx context.Context, db DBTX, t transition, now time.Time, r rows, args ...any) ([]Charge, error) {
	mv, err := Machine.MoveOrStay(t.to, t.from...)
	if err != nil {
		return nil, err
	}
	via := mv.Via()
	n := len(args)
	query := fmt.Sprintf(`UPDATE charges SET status = $%d, updated_at = $%d`, n+1, n+2)
	if t.to != Declined {
		query += ", next_attempt_at = NULL"
	}
	if t.set != "" {
		query += ", " + t.set
	}
	args = append(args, string(mv.To()), now, texts(mv.From()))
	where := r.selector
	if where == "" {
		query += fmt.Sprintf(` FROM unnest($%d::uuid[], $%d::int[], $%d::text[]) AS b(bid, battempt, bnote)`, n+4, n+5, n+6)
		where = "charges.id = b.bid AND (b.battempt = 0 OR charges.attempt_count = b.battempt)"
		args = append(args, r.ids, r.attempts, r.notes)
	}
	query += fmt.Sprintf(` WHERE %s AND charges.status = ANY($%d)`, where, n+3)
	if t.where != "" {
		query += " AND " + t.where
	}
	returning := ` RETURNING ` + columns
	if t.sealed != "" {
		returning += ", " + t.sealed
	}
	found, err := db.Query(ctx, query+returning, args...)
	moved, err := collectRows(found, err, t.sealed != "")
	if err != nil {
		return nil, fmt.Errorf("move charges to %s: %w", t.to, err)
	}
	for _, c := range moved {
		if via != "" {
			step := c
			step.Status = via
			if err := s.publish(ctx, db, "", step, now); err != nil {
				return nil, err
			}
		}
		if err := s.publish(ctx, db, t.event, c, now); err != nil {
			return nil, err
		}
	}
	return moved, nil
}

// oneMoved is the charge of a move by id (byID), or ErrStale when the
// guard held it back.
func oneMoved(moved []Charge, err error) (Charge, error) {
	if err != nil {
		return Charge{}, err
	}
	if len(moved) == 0 {
		return Charge{}, ErrStale
	}
	return moved[0], nil
}

// matching are the rows of a move over every charge that meets selector,
// a condition over the charges row that may use the move's arguments from
// $1.
func matching(selector string) rows { return rows{selector: selector} }

// inFlightSQL is the predicate of the partial index charges_in_flight_idx:
// in_flight, kept by a trigger from status, is true in scheduled,
// authorizing, authorized, capturing and unknown.
const inFlightSQL = "in_flight"

// settledStatuses are the statuses whose charges have a settled_at (the
// trigger's set): the moves that reach one are the ones the daily
// reconciliation and totals count.
var settledStatuses = []Status{Succeeded, Failed, Voided, Declined}

// statusInSQL is column IN (statuses), written out from the constants so
// that the planner matches it to a partial index's predicate (those of
// the off-path statuses are over off_path_status).
func statusInSQL(column string, statuses ...Status) string {
	return column + " IN ('" + strings.Join(texts(statuses), "', '") + "')"
}

// anyInFlightSQL names one open charge. The order makes the planner read
// the partial index of open charges: asked only whether one exists, it
// reads the heap from its start while its statistics say most charges are
// open, walking past every charge settled since.
const anyInFlightSQL = `SELECT subscription_id FROM charges WHERE ` + inFlightSQL + ` ORDER BY subscription_id LIMIT 1`

// AnyInFlight reports whether the pipeline is still working on a charge,
// for a benchmark waiting for them all to settle: a poll costs a few index
// pages however many charges there are.
func AnyInFlight(ctx context.Context, db DBTX) (bool, error) {
	var id uuid.UUID
	err := db.QueryRow(ctx, anyInFlightSQL).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for charges in flight: %w", err)
	}
	return true, nil
}

// LastSettled is when the last charge was settled (zero: none was), read
// from the settled charges' index: a benchmark's end, to the microsecond,
// however seldom it polls. Charges settled before the settled_at column
// existed and not yet reached by the layout job (FillSettled) are left
// out: any charge settled since is later.
func LastSettled(ctx context.Context, db DBTX) (time.Time, error) {
	var at *time.Time
	if err := db.QueryRow(ctx, `SELECT max(settled_at) FROM charges WHERE settled_at IS NOT NULL`).Scan(&at); err != nil {
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
