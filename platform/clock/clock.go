// Package clock is the only source of "now" for rebill's domain code.
//
// Production uses the wall clock. Dev mode uses a manual clock whose time is
// stored in PostgreSQL, so every node and every restart sees the same time
// and a month of billing can be exercised in seconds by advancing it.
package clock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Clock tells the time that scheduling and domain timestamps use.
type Clock interface {
	Now() time.Time
}

// Wall is the real clock.
type Wall struct{}

// Now returns the current UTC time with microsecond precision, the
// precision PostgreSQL stores, so values read back compare equal.
func (Wall) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// ErrBackwards is returned when asked to move the manual clock into the past.
var ErrBackwards = errors.New("the clock only moves forward")

// Manual is the dev-mode clock. It stands still until advanced, and its
// time lives in the dev_clock table so that all nodes agree on it.
type Manual struct {
	pool *pgxpool.Pool

	mu       sync.Mutex
	lastSeen time.Time
}

// NewManual returns the shared manual clock, initialising it to start when
// the database holds no time yet (the first start in dev mode).
func NewManual(ctx context.Context, pool *pgxpool.Pool, start time.Time) (*Manual, error) {
	_, err := pool.Exec(ctx, `INSERT INTO dev_clock (singleton, now) VALUES (true, $1) ON CONFLICT DO NOTHING`, start.UTC().Truncate(time.Second))
	if err != nil {
		return nil, fmt.Errorf("initialise dev clock: %w", err)
	}
	m := &Manual{pool: pool}
	if _, err := m.read(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Now reads the shared time. A failed read is tried again for up to two
// seconds (a dropped connection is replaced by the pool; answering at
// once with an old time would stamp domain writes with it). If the
// database still cannot be read it returns the last time it saw: the
// manual clock never moves backwards.
func (m *Manual) Now() time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		t, err := m.read(ctx)
		if err == nil {
			return t
		}
		select {
		case <-ctx.Done():
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.lastSeen
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (m *Manual) read(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := m.pool.QueryRow(ctx, `SELECT now FROM dev_clock`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read dev clock: %w", err)
	}
	return m.remember(t), nil
}

func (m *Manual) remember(t time.Time) time.Time {
	t = t.UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.lastSeen) {
		m.lastSeen = t
	}
	return m.lastSeen
}

// MaxMoveYears bounds one move of the manual clock. A larger jump is a
// typo, and a clock run towards year 9999 produces periods that RFC 3339
// cannot write.
const MaxMoveYears = 10

// ErrTooFar is returned when one move would take the clock more than
// MaxMoveYears ahead.
var ErrTooFar = fmt.Errorf("the clock moves at most %d years at a time", MaxMoveYears)

// Set moves the clock to t inside tx. Returns ErrBackwards if t is before
// the current time (setting the current time again is allowed and changes
// nothing) and ErrTooFar past the horizon.
func (m *Manual) Set(ctx context.Context, tx pgx.Tx, t time.Time) (time.Time, error) {
	return m.move(ctx, tx, func(time.Time) time.Time { return t.UTC() })
}

// Advance moves the clock forward by d (which must not be negative) inside
// tx; see Set.
func (m *Manual) Advance(ctx context.Context, tx pgx.Tx, d time.Duration) (time.Time, error) {
	if d < 0 {
		return time.Time{}, ErrBackwards
	}
	return m.move(ctx, tx, func(now time.Time) time.Time { return now.Add(d) })
}

// move runs in the caller's transaction, so a move commits or rolls back
// with the request that made it: an idempotent request whose transaction
// is rolled back (a retry that lost to the original) leaves the clock
// alone. The row lock queues concurrent moves, each from the time the one
// before it committed. The new time is not remembered here, since tx may
// still roll back; Now reads the row, so it shows the move once committed.
func (m *Manual) move(ctx context.Context, tx pgx.Tx, target func(now time.Time) time.Time) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now FROM dev_clock FOR UPDATE`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("lock dev clock: %w", err)
	}
	now = now.UTC()
	to := target(now)
	switch {
	case to.Before(now):
		return time.Time{}, ErrBackwards
	case to.After(now.AddDate(MaxMoveYears, 0, 0)):
		return time.Time{}, ErrTooFar
	}
	if err := tx.QueryRow(ctx, `UPDATE dev_clock SET now = $1 RETURNING now`, to).Scan(&to); err != nil {
		return time.Time{}, fmt.Errorf("move dev clock: %w", err)
	}
	return to.UTC(), nil
}
