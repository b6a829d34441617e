package sim

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pg"
)

//go:embed schema.sql
var schema string

// migrateLock is the advisory lock key that nodes migrating gatewaysim wait
// on ("gwsim_mg" folded into an int64): CREATE ... IF NOT EXISTS is not safe
// against a concurrent CREATE of the same object.
const migrateLock int64 = 0x6777_7369_6d5f_6d67

// Migrate creates the gatewaysim schema and its tables if they are missing.
// It is idempotent and safe to run from several nodes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		if _, err := tx.Exec(ctx, schema); err != nil {
			return fmt.Errorf("apply schema: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate gatewaysim: %w", err)
	}
	return nil
}

// errKeyReused: an idempotency key already names a different operation.
// A real provider refuses such a call rather than replaying a result that
// does not answer the request.
var errKeyReused = errors.New("idempotency key already used for a different request")

// Store is the sim's ledger and fault switches in PostgreSQL. The HTTP
// server uses it, and so can rebill's dev endpoints, without a round trip.
type Store struct {
	pool *pgxpool.Pool
	// clock stamps operations (see [Store.OnClock]).
	clock clock.Clock
	// faultsTTL > 0 keeps each gateway's switches that long (see
	// CacheFaults); cached holds them.
	faultsTTL time.Duration
	mu        sync.Mutex
	cached    map[string]cachedFaults
}

// NewStore returns a Store on pool that stamps operations with the wall
// clock. [Migrate] must have run.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, clock: clock.Wall{}}
}

// OnClock makes s stamp the operations it records with clk, and returns s.
// In dev mode that is rebill's dev clock: the sim then files an operation
// under the day the service clock shows, so reconciliation and `rebill
// audit` of a day reached by moving the clock find its operations.
// ReceivedAt stays on real time.
func (s *Store) OnClock(clk clock.Clock) *Store {
	s.clock = clk
	return s
}

// LedgerEntry is one operation as the dev ledger shows it.
type LedgerEntry struct {
	Op             gateway.Op     `json:"op"`
	IdempotencyKey string         `json:"idempotency_key"`
	Reference      string         `json:"reference"`
	TokenLast4     string         `json:"token_last4"`
	Amount         int64          `json:"amount"`
	Currency       string         `json:"currency"`
	Status         gateway.Status `json:"status"`
	DeclineCode    string         `json:"decline_code,omitempty"`
	// At is the operation's time on the sim's clock (the dev clock in dev
	// mode), the time look-ups and day listings report.
	At time.Time `json:"at"`
	// ReceivedAt is the real time the sim recorded it, for harnesses that
	// order operations against their own requests.
	ReceivedAt time.Time `json:"received_at"`
	// Receipt is the fiscal receipt the operation was sent with, as the
	// first call under its key sent it; absent when none.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// opRequest is one operation call as the server received it.
type opRequest struct {
	Op              gateway.Op
	IdempotencyKey  string
	Token           string
	Amount          int64
	Currency        string
	ChargeKey       string
	AuthorizationID string
	Receipt         json.RawMessage
}

// operation is one ledger row.
type operation struct {
	Op              gateway.Op
	IdempotencyKey  string
	Reference       string
	AuthorizationID string
	TokenLast4      string
	Kind            tokenKind
	ChargeKey       string
	Amount          int64
	Currency        string
	Status          gateway.Status
	DeclineCode     string
	Hard            bool
	At              time.Time
	ReceivedAt      time.Time
	Receipt         json.RawMessage
}

// answers reports whether the stored operation is the one req asks for, so
// that a replay may return it.
func (o operation) answers(req opRequest) bool {
	if o.Op != req.Op || o.AuthorizationID != req.AuthorizationID {
		return false
	}
	// Like Stripe, which compares every parameter of a key's requests: a
	// hold asked again of another card is another request.
	if o.Op == gateway.OpAuthorize && o.TokenLast4 != last4(req.Token) {
		return false
	}
	// A void records the authorization's amount, whatever the call said.
	return o.Op == gateway.OpVoid || (o.Amount == req.Amount && o.Currency == req.Currency)
}

// answerIsLost reports whether the sim swallows the answer to this
// operation: tok_lost_response loses authorizations, captures and
// refunds (the refunds_lost fault loses every refund's).
func (o operation) answerIsLost() bool {
	return o.Kind == kindLostResponse && o.Op != gateway.OpVoid
}

func (o operation) ledgerEntry() LedgerEntry {
	return LedgerEntry{
		Op:             o.Op,
		IdempotencyKey: o.IdempotencyKey,
		Reference:      o.Reference,
		TokenLast4:     o.TokenLast4,
		Amount:         o.Amount,
		Currency:       o.Currency,
		Status:         o.Status,
		DeclineCode:    o.DeclineCode,
		At:             o.At,
		ReceivedAt:     o.ReceivedAt,
		Receipt:        o.Receipt,
	}
}

const operationColumns = `op, idempotency_key, reference, coalesce(authorization_id, ''),
	token_last4, token_kind, charge_key, amount, currency, status, decline_code, hard, at, received_at, receipt`

func scanOperation(row pgx.Row) (operation, error) {
	var o operation
	err := row.Scan(&o.Op, &o.IdempotencyKey, &o.Reference, &o.AuthorizationID,
		&o.TokenLast4, &o.Kind, &o.ChargeKey, &o.Amount, &o.Currency,
		&o.Status, &o.DeclineCode, &o.Hard, &o.At, &o.ReceivedAt, &o.Receipt)
	o.At, o.ReceivedAt = o.At.UTC(), o.ReceivedAt.UTC()
	return o, err
}

func collectOperations(rows pgx.Rows) ([]operation, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (operation, error) {
		return scanOperation(row)
	})
}

// Ledger returns every operation gw processed, oldest first.
func (s *Store) Ledger(ctx context.Context, gw string) ([]LedgerEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+operationColumns+`
		FROM gatewaysim.operations WHERE gateway = $1 ORDER BY at, id`, gw)
	if err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", gw, err)
	}
	ops, err := collectOperations(rows)
	if err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", gw, err)
	}
	entries := make([]LedgerEntry, len(ops))
	for i, o := range ops {
		entries[i] = o.ledgerEntry()
	}
	return entries, nil
}

// operationsOn returns gw's operations on the UTC day that contains day,
// oldest first.
func (s *Store) operationsOn(ctx context.Context, gw string, day time.Time) ([]operation, error) {
	from := day.UTC().Truncate(24 * time.Hour)
	rows, err := s.pool.Query(ctx, `SELECT `+operationColumns+`
		FROM gatewaysim.operations
		WHERE gateway = $1 AND at >= $2 AND at < $3 ORDER BY at, id`,
		gw, from, from.Add(24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("list operations of %s on %s: %w", gw, from.Format(time.DateOnly), err)
	}
	ops, err := collectOperations(rows)
	if err != nil {
		return nil, fmt.Errorf("list operations of %s on %s: %w", gw, from.Format(time.DateOnly), err)
	}
	return ops, nil
}

// lookup returns the operation gw recorded for key, or gateway.ErrNotFound.
func (s *Store) lookup(ctx context.Context, gw, key string) (operation, error) {
	o, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+operationColumns+`
		FROM gatewaysim.operations WHERE gateway = $1 AND idempotency_key = $2`, gw, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return operation{}, gateway.ErrNotFound
	}
	if err != nil {
		return operation{}, fmt.Errorf("look up %s operation %q: %w", gw, key, err)
	}
	return o, nil
}

// countCall counts one more call with key and returns the count so far.
func (s *Store) countCall(ctx context.Context, gw, key string) (int, error) {
	var calls int
	err := s.pool.QueryRow(ctx, `
		INSERT INTO gatewaysim.call_counters AS c (gateway, idempotency_key, calls)
		VALUES ($1, $2, 1)
		ON CONFLICT (gateway, idempotency_key) DO UPDATE SET calls = c.calls + 1
		RETURNING calls`, gw, key).Scan(&calls)
	if err != nil {
		return 0, fmt.Errorf("count %s call %q: %w", gw, key, err)
	}
	return calls, nil
}

// kindOf tells which test token governs req: its own, or for a capture or
// void sent without one, the token of the authorization it names.
func (s *Store) kindOf(ctx context.Context, gw string, req opRequest) (tokenKind, error) {
	if req.Token != "" || req.Op == gateway.OpAuthorize {
		return classify(req.Token), nil
	}
	var kind tokenKind
	err := s.pool.QueryRow(ctx, `SELECT token_kind FROM gatewaysim.operations
		WHERE gateway = $1 AND reference = $2 AND op = 'authorize'`,
		gw, req.AuthorizationID).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return kindInvalid, nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s authorization %q: %w", gw, req.AuthorizationID, err)
	}
	return kind, nil
}

// perform records req unless its idempotency key already has an operation,
// and returns the operation that key stands for. Concurrent calls with one
// key all return the row of whichever inserted first. Returns errKeyReused
// when that row is not the operation req asks for.
func (s *Store) perform(ctx context.Context, gw string, req opRequest, kind tokenKind) (operation, error) {
	// Read before any transaction: the dev clock is a query of its own.
	at := s.clock.Now().UTC()
	var o operation
	var err error
	switch {
	case req.Op == gateway.OpAuthorize && kind == kindFundsAfter:
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			o, err = authorizeRecovering(ctx, tx, gw, req, at)
			return err
		})
	case req.Op == gateway.OpAuthorize:
		// Decided without reading anything: its insert is the whole of it,
		// one statement that needs no transaction around it.
		o = verdict(req, kind, nil, "", 0)
		o.At = at
		o, err = record(ctx, s.pool, gw, o)
	default:
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			o, err = settle(ctx, tx, gw, req, kind, at)
			return err
		})
	}
	if err != nil {
		return operation{}, fmt.Errorf("%s %s %q: %w", gw, req.Op, req.IdempotencyKey, err)
	}
	if !o.answers(req) {
		return operation{}, fmt.Errorf("%s %s %q: %w", gw, req.Op, req.IdempotencyKey, errKeyReused)
	}
	return o, nil
}

// authorizeRecovering decides and records an authorize with a recovering
// token. Its first attempt at gw is kept in token_first_seen in the same
// transaction as the operation, so the time cannot exist without the
// attempt. Concurrent first attempts queue on that row's key: the first
// to commit sets the time, and the others, their insert done, read it in
// a statement of their own, which sees the committed row.
func authorizeRecovering(ctx context.Context, tx pgx.Tx, gw string, req opRequest, at time.Time) (operation, error) {
	// A replay answers what its key recorded and is no attempt of its own.
	prior, err := scanOperation(tx.QueryRow(ctx, `SELECT `+operationColumns+` FROM gatewaysim.operations
		WHERE gateway = $1 AND idempotency_key = $2`, gw, req.IdempotencyKey))
	if err == nil {
		return prior, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return operation{}, fmt.Errorf("look up the key: %w", err)
	}
	hash := tokenHash(req.Token)
	if _, err := tx.Exec(ctx, `INSERT INTO gatewaysim.token_first_seen (gateway, token_sha256, first_at)
		VALUES ($1, $2, $3) ON CONFLICT (gateway, token_sha256) DO NOTHING`, gw, hash, at); err != nil {
		return operation{}, fmt.Errorf("note the token's first attempt: %w", err)
	}
	var first time.Time
	if err := tx.QueryRow(ctx, `SELECT first_at FROM gatewaysim.token_first_seen
		WHERE gateway = $1 AND token_sha256 = $2`, gw, hash).Scan(&first); err != nil {
		return operation{}, fmt.Errorf("read the token's first attempt: %w", err)
	}
	o := verdict(req, recoveredKind(req.Token, first, at), nil, "", 0)
	o.At = at
	return record(ctx, tx, gw, o)
}

// settle decides a capture or void and records it. A repeated key is not
// looked up first: its decision finds the authorization already settled
// (by this very key), and the insert, finding the key taken, returns the
// operation recorded under it.
func settle(ctx context.Context, tx pgx.Tx, gw string, req opRequest, kind tokenKind, at time.Time) (operation, error) {
	o, err := decide(ctx, tx, gw, req, kind)
	if err != nil {
		return operation{}, err
	}
	o.At = at
	return record(ctx, tx, gw, o)
}

// record inserts o, stamped o.At, unless its idempotency key already has
// an operation, and returns the operation the key stands for. A concurrent call with the
// same key blocks on the unique index until the first commits, then
// inserts nothing; the winner's row is visible to the next statement.
func record(ctx context.Context, db pg.DBTX, gw string, o operation) (operation, error) {
	inserted, err := scanOperation(db.QueryRow(ctx, `
		INSERT INTO gatewaysim.operations (gateway, op, idempotency_key, reference,
			authorization_id, token_last4, token_kind, charge_key, amount, currency,
			status, decline_code, hard, at, receipt)
		VALUES ($1, $2, $3, $1 || '_op_' || gen_random_uuid(), nullif($4, ''),
			$5, $6, $7, $8, $9, $10, $11, $12, $13, $14::text::jsonb)
		ON CONFLICT (gateway, idempotency_key) DO NOTHING
		RETURNING `+operationColumns,
		gw, o.Op, o.IdempotencyKey, o.AuthorizationID, o.TokenLast4, o.Kind,
		o.ChargeKey, o.Amount, o.Currency, o.Status, o.DeclineCode, o.Hard, o.At, receiptText(o.Receipt)))
	if errors.Is(err, pgx.ErrNoRows) {
		return scanOperation(db.QueryRow(ctx, `SELECT `+operationColumns+` FROM gatewaysim.operations
			WHERE gateway = $1 AND idempotency_key = $2`, gw, o.IdempotencyKey))
	}
	return inserted, err
}

// decide is the provider's verdict on a new operation. A capture, void or
// refund locks its authorization so that two of them cannot both settle
// it, nor two refunds both return its last money.
func decide(ctx context.Context, tx pgx.Tx, gw string, req opRequest, kind tokenKind) (operation, error) {
	if req.Op == gateway.OpAuthorize {
		return verdict(req, kind, nil, "", 0), nil
	}
	auth, err := scanOperation(tx.QueryRow(ctx, `SELECT `+operationColumns+`
		FROM gatewaysim.operations
		WHERE gateway = $1 AND reference = $2 AND op = 'authorize'
		FOR UPDATE`, gw, req.AuthorizationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return verdict(req, kind, nil, "", 0), nil
	}
	if err != nil {
		return operation{}, fmt.Errorf("lock authorization %q: %w", req.AuthorizationID, err)
	}
	var settledBy gateway.Op
	var refunded int64
	err = tx.QueryRow(ctx, `SELECT
			coalesce((SELECT op FROM gatewaysim.operations WHERE gateway = $1 AND authorization_id = $2
				AND status = 'succeeded' AND op IN ('capture', 'void') LIMIT 1), ''),
			coalesce((SELECT sum(amount) FROM gatewaysim.operations WHERE gateway = $1 AND authorization_id = $2
				AND status = 'succeeded' AND op = 'refund'), 0)::bigint`, gw, req.AuthorizationID).Scan(&settledBy, &refunded)
	if err != nil {
		return operation{}, fmt.Errorf("read settlement of %q: %w", req.AuthorizationID, err)
	}
	return verdict(req, kind, &auth, settledBy, refunded), nil
}

// receiptText is a receipt as the insert takes it: NULL when none.
func receiptText(r json.RawMessage) *string {
	if r == nil {
		return nil
	}
	return new(string(r))
}
