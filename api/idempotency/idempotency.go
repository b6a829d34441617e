// Package idempotency makes every POST safe to retry, as the OpenAPI document's table
// requires: the key is reserved atomically before the handler runs, the
// handler runs inside a transaction that also stores its response, and a
// retry gets that stored response byte for byte.
//
// # Why the response is stored in the handler's transaction
//
// The handler's writes and the completed idempotency record commit
// together. A crash before the commit leaves neither (the reservation's
// lease expires and a retry executes afresh); a crash after it leaves both
// (a retry replays). No window exists in which the effect happened but the
// response is lost, so a retried request converges on exactly one effect.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/internal/metrics"
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
}

// NewStore returns a store whose reservations expire after lease: the
// time after which a request that crashed mid-flight may be retried.
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

// Reserve claims (scope, key) for a request with this fingerprint. It
// inserts a processing record, or, if one exists, reports what to do; a
// processing record whose lease has expired is taken over.
func (s *Store) Reserve(ctx context.Context, scope, key string, fingerprint []byte) (Outcome, Record, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, fingerprint, status, locked_until)
		VALUES ($1, $2, $3, 'processing', now() + $4::interval) ON CONFLICT DO NOTHING`,
		scope, key, fingerprint, s.lease)
	if err != nil {
		return 0, Record{}, fmt.Errorf("%w: reserve key: %w", ErrStoreUnavailable, err)
	}
	if tag.RowsAffected() == 1 {
		return Execute, Record{}, nil
	}

	// Two looks at most: a takeover that loses to a request completing at
	// that moment re-reads the now completed record.
	for look := 0; ; look++ {
		outcome, rec, expired, err := s.read(ctx, scope, key, fingerprint)
		if err != nil || !expired {
			return outcome, rec, err
		}
		tag, err := s.pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + $3::interval
			WHERE principal = $1 AND key = $2 AND status = 'processing' AND locked_until <= now()`, scope, key, s.lease)
		if err != nil {
			return 0, Record{}, fmt.Errorf("%w: take over key: %w", ErrStoreUnavailable, err)
		}
		if tag.RowsAffected() == 1 {
			metrics.IdempotencyTakeovers.Inc()
			return Execute, Record{}, nil
		}
		if look == 1 {
			return InFlight, Record{}, nil
		}
	}
}

// read reports what an existing record means for this request; expired is
// true for a processing record whose lease ran out.
func (s *Store) read(ctx context.Context, scope, key string, fingerprint []byte) (Outcome, Record, bool, error) {
	var (
		stored    []byte
		status    string
		expired   bool
		rec       Record
		headerRaw []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, status, locked_until <= now(), coalesce(response_status, 0),
			response_headers, response_body
		FROM idempotency_keys WHERE principal = $1 AND key = $2`, scope, key).
		Scan(&stored, &status, &expired, &rec.Status, &headerRaw, &rec.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		// Released or deleted since the insert: the caller may retry.
		return InFlight, Record{}, false, nil
	}
	if err != nil {
		return 0, Record{}, false, fmt.Errorf("%w: read key: %w", ErrStoreUnavailable, err)
	}
	if !bytes.Equal(stored, fingerprint) {
		return Mismatch, Record{}, false, nil
	}
	if status == "completed" {
		if err := json.Unmarshal(headerRaw, &rec.Headers); err != nil {
			return 0, Record{}, false, fmt.Errorf("decode stored headers: %w", err)
		}
		return Replay, rec, false, nil
	}
	return InFlight, Record{}, expired, nil
}

// Begin opens the transaction that the handler runs in.
func (s *Store) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %w", ErrStoreUnavailable, err)
	}
	return tx, nil
}

// ErrCompletedElsewhere: while this request ran, the request whose expired
// lease it took over turned out to be alive and completed first. Roll back
// and answer with the stored response: the key's effect happened once.
var ErrCompletedElsewhere = errors.New("idempotency key completed by another request")

// Complete stores the response in tx, the handler's transaction. The
// update locks the record; if another holder of the key (a request whose
// lease expired while it was still running) completes first, this waits
// for it and returns ErrCompletedElsewhere.
func (s *Store) Complete(ctx context.Context, tx pgx.Tx, scope, key string, rec Record) error {
	headers, err := json.Marshal(rec.Headers)
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE idempotency_keys SET status = 'completed', response_status = $3,
			response_headers = $4, response_body = $5
		WHERE principal = $1 AND key = $2 AND status = 'processing'`, scope, key, rec.Status, headers, rec.Body)
	if err != nil {
		return fmt.Errorf("store response: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrCompletedElsewhere
	}
	return nil
}

// Release forgets a reservation whose request was refused before it
// executed, so the same key with a corrected request runs normally. If it
// fails, the lease expires and has the same effect later.
func (s *Store) Release(ctx context.Context, scope, key string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2 AND status = 'processing'`, scope, key)
	if err != nil {
		return fmt.Errorf("release key: %w", err)
	}
	return nil
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
