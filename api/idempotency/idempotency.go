// Package idempotency makes every POST safe to retry, as the OpenAPI document's table
// requires: the handler runs inside a transaction that holds the key and
// also stores its response, and a retry gets that stored response byte for
// byte.
//
// # Why the response is stored in the handler's transaction
//
// The handler's writes and the completed idempotency record commit
// together, in the request's one commit. A crash before the commit leaves
// neither (a retry executes afresh); a crash after it leaves both (a retry
// replays). No window exists in which the effect happened but the response
// is lost, so a retried request converges on exactly one effect.
//
// # How a duplicate in flight is refused at once
//
// Nothing is written before the handler runs: the transaction's first
// statement takes an advisory lock on the key, held until the transaction
// ends, and reads the stored record in the same round trip. A concurrent
// duplicate does not get the lock and answers 409 at once instead of
// waiting; a crashed request's lock ends with its connection. See
// [Store.Claim].
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/metrics"
)

// Outcome of reserving a key.
type Outcome int

const (
	// Execute: this request owns the key and must run.
	Execute Outcome = iota
	// Replay: the request already completed; send Record's response.
	Replay
	// InFlight: another request holds the key's lease.
	InFlight
	// Mismatch: the key was used for a different request.
	Mismatch
)

// Record is a stored response.
type Record struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// ErrStoreUnavailable: the database could not be reached; nothing ran.
var ErrStoreUnavailable = errors.New("idempotency store unavailable")

// Store keeps idempotency records in PostgreSQL.
type Store struct {
	pool  *pgxpool.Pool
	lease time.Duration
	// claimed runs between a claim and its handler (tests).
	claimed func(ctx context.Context, scope, key string)
}

// NewStore returns a store. lease is how long a processing record of the
// former protocol holds its key: the time after which such a request that
// crashed mid-flight may be retried, and the lease a takeover gives it.
func NewStore(pool *pgxpool.Pool, lease time.Duration) *Store {
	return &Store{pool: pool, lease: lease}
}

// Fingerprint identifies a request: its method, path and body, where a
// JSON body is canonicalised so key order and whitespace do not matter.
func Fingerprint(method, path string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(canonicalJSON(body))
	return h.Sum(nil)
}

func canonicalJSON(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return trimmed
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return trimmed
	}
	return out
}

// The statuses of a record. A completed record holds the response; the
// processing status is written only by the former protocol, which reserved
// a key in a commit of its own before running the request, and is still
// honoured (a live lease is in flight, an expired one is taken over) so
// that nodes of both kinds can serve during a rolling deploy.
const (
	statusProcessing = "processing"
	statusCompleted  = "completed"
)

// SetClaimedHook makes fn run after a request has claimed its key and
// before its handler runs. Tests use it to land a duplicate's commit in
// that window; nil removes it.
func (s *Store) SetClaimedHook(fn func(ctx context.Context, scope, key string)) { s.claimed = fn }

// lockID is the advisory lock that a request executing (scope, key) holds
// until its transaction ends: the first 8 bytes of SHA-256 over a
// namespace, the scope and the key, the same on every node (hash/maphash
// is seeded per process and would not be). Two different keys that hash
// alike only make one of them answer 409 idempotency-key-in-use while the
// other is executing, a moment; a replay is read without the lock and is
// never refused for it.
func lockID(scope, key string) int64 {
	h := sha256.New()
	h.Write([]byte("rebill idempotency\x00"))
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}

// Claim is a request's hold on its key: the transaction its handler runs
// in, which also stores the response and ends with one commit.
type Claim struct {
	conn        *pgxpool.Conn
	tx          pgx.Tx
	scope, key  string
	fingerprint []byte
	// legacy: the key's processing record of the former protocol was taken
	// over; it is completed in place rather than inserted.
	legacy bool
	done   bool
}

// Tx is the transaction the request executes in.
func (c *Claim) Tx() pgx.Tx { return c.tx }

// Claim opens the request's transaction and claims (scope, key) in it for
// a request with this fingerprint. Only Execute returns a Claim, which the
// caller ends with Complete or Rollback.
//
// The claim is a transaction-level advisory lock taken with the look at
// the stored record, in one round trip. A concurrent duplicate fails to
// take the lock and answers InFlight at once (the 409 the contract
// promises), with nothing committed before the request runs; the lock
// ends with the transaction, also when the process dies. The look's
// snapshot is taken just before the lock: a duplicate that commits in
// between is seen by Complete, whose insert then conflicts, and the
// request rolls back and replays.
func (s *Store) Claim(ctx context.Context, scope, key string, fingerprint []byte) (Outcome, Record, *Claim, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, Record{}, nil, fmt.Errorf("%w: acquire connection: %w", ErrStoreUnavailable, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return 0, Record{}, nil, fmt.Errorf("%w: begin: %w", ErrStoreUnavailable, err)
	}
	c := &Claim{conn: conn, tx: tx, scope: scope, key: key, fingerprint: fingerprint}
	var (
		locked  bool
		found   storedRecord
		status  *string
		expired *bool
	)
	err = tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1), k.fingerprint, k.status, k.locked_until <= now(),
			coalesce(k.response_status, 0), k.response_headers, k.response_body
		FROM (SELECT) AS one LEFT JOIN idempotency_keys k ON k.principal = $2 AND k.key = $3`,
		lockID(scope, key), scope, key).
		Scan(&locked, &found.fingerprint, &status, &expired, &found.rec.Status, &found.headers, &found.rec.Body)
	if err != nil {
		c.Rollback(ctx)
		return 0, Record{}, nil, fmt.Errorf("%w: claim key: %w", ErrStoreUnavailable, err)
	}
	outcome, rec := InFlight, Record{}
	switch {
	case status == nil && locked:
		outcome = Execute
	case status == nil:
	case *status == statusCompleted || !bytes.Equal(found.fingerprint, fingerprint):
		found.status = *status
		outcome, rec, err = found.outcome(fingerprint)
	case locked && *expired:
		outcome, err = s.takeOver(ctx, c)
	}
	if outcome != Execute || err != nil {
		c.Rollback(ctx)
		if outcome == Replay && err == nil {
			return outcome, rec, nil, nil
		}
		if err == nil && c.legacy {
			// The former holder completed at that moment: answer as it did.
			outcome, rec, err = s.Lookup(ctx, scope, key, fingerprint)
		}
		return outcome, rec, nil, err
	}
	if s.claimed != nil {
		s.claimed(ctx, scope, key)
	}
	return Execute, Record{}, c, nil
}

// takeOver claims, in c's transaction, the processing record of the
// former protocol whose lease has expired: the update locks the record, so
// the former holder, if it was alive after all and completes now, waits
// for this request and then finds the key completed (and replays). If it
// completed first, the update finds no processing record and the request
// looks again.
func (s *Store) takeOver(ctx context.Context, c *Claim) (Outcome, error) {
	tag, err := c.tx.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + $3::interval
		WHERE principal = $1 AND key = $2 AND status = '`+statusProcessing+`' AND locked_until <= now()`,
		c.scope, c.key, s.lease)
	if err != nil {
		return 0, fmt.Errorf("%w: take over key: %w", ErrStoreUnavailable, err)
	}
	c.legacy = true
	if tag.RowsAffected() == 0 {
		return InFlight, nil
	}
	metrics.IdempotencyTakeovers.Inc()
	return Execute, nil
}

// storedRecord is a record as read.
type storedRecord struct {
	fingerprint []byte
	status      string
	headers     []byte
	rec         Record
}

// outcome is what the record means for a request with fingerprint.
func (st storedRecord) outcome(fingerprint []byte) (Outcome, Record, error) {
	switch {
	case !bytes.Equal(st.fingerprint, fingerprint):
		return Mismatch, Record{}, nil
	case st.status != statusCompleted:
		return InFlight, Record{}, nil
	}
	rec := st.rec
	if err := json.Unmarshal(st.headers, &rec.Headers); err != nil {
		return 0, Record{}, fmt.Errorf("decode stored headers: %w", err)
	}
	return Replay, rec, nil
}

// Lookup reports what the stored record of (scope, key) means for a
// request with this fingerprint, outside any transaction: after a claim
// that lost to another request, whose answer is then the stored one. No
// record (a former-protocol reservation released since) is InFlight: the
// caller may retry.
func (s *Store) Lookup(ctx context.Context, scope, key string, fingerprint []byte) (Outcome, Record, error) {
	var st storedRecord
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, status, coalesce(response_status, 0), response_headers, response_body
		FROM idempotency_keys WHERE principal = $1 AND key = $2`, scope, key).
		Scan(&st.fingerprint, &st.status, &st.rec.Status, &st.headers, &st.rec.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return InFlight, Record{}, nil
	}
	if err != nil {
		return 0, Record{}, fmt.Errorf("%w: read key: %w", ErrStoreUnavailable, err)
	}
	return st.outcome(fingerprint)
}

// ErrCompletedElsewhere: another request completed the key while this one
// ran (a duplicate whose commit landed just before this claim's lock, or,
// during a rolling deploy, a request of the former protocol). The claim
// has been rolled back; the answer is the stored response (Lookup): the
// key's effect happened once.
var ErrCompletedElsewhere = errors.New("idempotency key completed by another request")

// Complete stores the response in c's transaction and commits it with the
// handler's writes. The record is inserted and the transaction committed
// in one round trip: a record that exists by now makes the insert fail,
// the commit behind it is then never run, and Complete rolls everything
// back and returns ErrCompletedElsewhere. Any other error leaves it unknown
// whether the commit landed; a retry then replays or executes afresh.
func (s *Store) Complete(ctx context.Context, c *Claim, rec Record) error {
	if c.done {
		return pgx.ErrTxClosed
	}
	headers, err := json.Marshal(rec.Headers)
	if err != nil {
		c.Rollback(ctx)
		return fmt.Errorf("encode headers: %w", err)
	}
	if c.legacy {
		return s.completeTakenOver(ctx, c, rec, headers)
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO idempotency_keys (principal, key, fingerprint, status, locked_until,
			response_status, response_headers, response_body)
		VALUES ($1, $2, $3, '`+statusCompleted+`', now(), $4, $5, $6)`,
		c.scope, c.key, c.fingerprint, rec.Status, headers, rec.Body)
	var commitTag pgconn.CommandTag
	batch.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		commitTag = tag
		return nil
	})
	err = c.tx.SendBatch(ctx, batch).Close()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idempotency_keys_pkey":
		c.Rollback(ctx)
		return ErrCompletedElsewhere
	case err != nil:
		c.Rollback(ctx)
		return fmt.Errorf("store response and commit: %w", err)
	case commitTag.String() != "COMMIT":
		c.Rollback(ctx)
		return fmt.Errorf("store response and commit: %w", pgx.ErrTxCommitRollback)
	}
	// The transaction pgx began has ended on the server; its object is
	// dropped unused and the connection, idle again, goes back to the pool.
	c.done = true
	c.conn.Release()
	return nil
}

// completeTakenOver completes a former-protocol record in place. The
// takeover locked it, so the update finds it; should it not, another
// request completed the key and this one rolls back.
func (s *Store) completeTakenOver(ctx context.Context, c *Claim, rec Record, headers []byte) error {
	tag, err := c.tx.Exec(ctx, `UPDATE idempotency_keys SET status = '`+statusCompleted+`', response_status = $3,
			response_headers = $4, response_body = $5
		WHERE principal = $1 AND key = $2 AND status = '`+statusProcessing+`'`, c.scope, c.key, rec.Status, headers, rec.Body)
	if err != nil {
		c.Rollback(ctx)
		return fmt.Errorf("store response: %w", err)
	}
	if tag.RowsAffected() == 0 {
		c.Rollback(ctx)
		return ErrCompletedElsewhere
	}
	c.done = true
	defer c.conn.Release()
	if err := c.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Rollback ends c's transaction without storing anything: the request was
// refused, failed, or lost its key to another request. A former-protocol
// record it took over is deleted, as that protocol released a refused
// request's reservation, so that a corrected request executes at once.
// It does nothing once c has ended.
func (c *Claim) Rollback(ctx context.Context) {
	if c.done {
		return
	}
	c.done = true
	ctx = context.WithoutCancel(ctx)
	_ = c.tx.Rollback(ctx)
	if c.legacy && !c.conn.Conn().IsClosed() {
		// If this fails, the lease expires and has the same effect later.
		_, _ = c.conn.Exec(ctx, `DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2
			AND status = '`+statusProcessing+`' AND locked_until <= now()`, c.scope, c.key)
	}
	c.conn.Release()
}

// DeleteExpired removes records created more than ttl ago, in batches so
// that no long transaction holds up vacuum.
func (s *Store) DeleteExpired(ctx context.Context, ttl time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE ctid IN (
			SELECT ctid FROM idempotency_keys WHERE created_at < now() - $1::interval LIMIT 5000)`, ttl)
		if err != nil {
			return total, fmt.Errorf("delete expired idempotency records: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}
