// Package velocity limits how fast one customer may act, to blunt card
// testing and runaway clients: subscriptions created per hour and
// payment-method changes per day through customer keys, and declined
// charges per day, past which further charges go to review instead of the
// gateway.
//
// # Counting across nodes
//
// Counters live in PostgreSQL (velocity_counters), one row per customer and
// limit holding the count of the current window. Windows are fixed and on
// the service clock: the clock hour, or the UTC day. [Limiter.Take] counts
// in the caller's transaction with one upsert, so a request that is
// refused or rolled back counts nothing, and the row lock orders one
// customer's concurrent requests on every node: of N at once, exactly the
// limit pass.
//
// # Slots of calls in flight
//
// A limit on outcomes (declines) cannot be checked by counting them: the
// outcome of a call is known only after it, so calls sent at once would
// all pass a check made before any of them was answered. Such calls
// reserve a slot first ([Slots]): a slot is granted while the window's
// recorded events plus the slots held stay under the maximum, and is
// given back when the call's outcome does not count (an approval) or
// turned into the event when it does (a decline). The slots live in the
// counter's row, so the same row lock that orders the counts orders the
// reservations across nodes; a new window drops them with the count. A
// slot whose call ended without a word to the slots (its caller died, or
// the call's outcome was settled elsewhere) is given back by a periodic
// sweep ([Slots.Sweep]) that asks the callers' owner which calls are
// still in flight, so it does not hold the customer back until the
// window ends. Calls on a card approved lately take their slots from a
// pool of their own until the card declines, and a call waiting for a
// slot is woken when one is given back (see [Slots]).
package velocity

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/pg"
)

// Limit names a counter and its window.
type Limit struct {
	Name   string
	Window time.Duration // time.Hour or 24 * time.Hour; a day is the UTC day
}

// The limits of docs/security.md ("Velocity limits").
var (
	Creations            = Limit{Name: "creations", Window: time.Hour}
	PaymentMethodChanges = Limit{Name: "payment_method_changes", Window: 24 * time.Hour}
	Declines             = Limit{Name: "declines", Window: 24 * time.Hour}
)

// ExceededError refuses an action over its limit until RetryAfter has
// passed (the end of the window).
type ExceededError struct {
	Limit      Limit
	Max        int
	RetryAfter time.Duration
}

func (*ExceededError) ErrorCode() fault.Code { return fault.Limited }

func (e *ExceededError) Error() string {
	return fmt.Sprintf("velocity limit %s: at most %d per %s; retry in %s", e.Limit.Name, e.Max, windowName(e.Limit), e.RetryAfter)
}

// RetryAfterSeconds rounds RetryAfter up to whole seconds, at least 1, for
// the Retry-After header.
func (e *ExceededError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

func windowName(l Limit) string {
	if l.Window == time.Hour {
		return "hour"
	}
	return "day"
}

// Limiter applies the configured maxima; a maximum of 0 turns its limit
// off.
type Limiter struct {
	Clock clock.Clock
	Max   map[Limit]int
}

// window returns the start and end of l's window containing now.
func window(l Limit, now time.Time) (time.Time, time.Time) {
	start := now.UTC().Truncate(l.Window) // whole hours and days since the Unix epoch: UTC-aligned
	return start, start.Add(l.Window)
}

// Take counts one action of customerID against l in tx. Over the maximum
// it returns an *ExceededError, and tx must be rolled back, which undoes
// the count: refused requests do not extend the wait.
func (lim *Limiter) Take(ctx context.Context, tx pg.DBTX, customerID string, l Limit) error {
	maximum := lim.Max[l]
	if maximum <= 0 {
		return nil
	}
	now := lim.Clock.Now()
	start, end := window(l, now)
	count, err := count(ctx, tx, customerID, l, start, "", "")
	if err != nil {
		return err
	}
	return lim.judge(l, maximum, count, now, end)
}

// judge refuses the count-th action of a window ending at end.
func (lim *Limiter) judge(l Limit, maximum, count int, now, end time.Time) error {
	if count > maximum {
		metrics.VelocityLimited.WithLabelValues(l.Name).Inc()
		return &ExceededError{Limit: l, Max: maximum, RetryAfter: end.Sub(now)}
	}
	return nil
}

// Taken is the outcome of a count queued by [Limiter.QueueTake].
type Taken struct {
	read bool
	err  error
}

// Err is what Take would have returned once the batch's results are
// read: nil, or an *ExceededError after which the transaction must roll
// back. A statement error is not here: the batch's Close returns it. Read
// before the batch was, it is an error, so that a batch never sent does
// not pass as counted. A nil Taken (no limit to count) is nil.
func (t *Taken) Err() error {
	if t == nil {
		return nil
	}
	if !t.read {
		return fmt.Errorf("velocity count not read: its batch was not sent")
	}
	return t.err
}

// QueueTake queues Take's count on b, for a caller that sends b in its
// transaction with statements of its own, so that the count costs no
// round trip of its own. The refusal is read from the returned Taken,
// not from the batch: the statements after the count run and are read
// whatever it says (the caller rolls back), and a batch whose Close
// failed drops its statements from pgx's cache. Returns nil when l has
// no maximum (nothing queued).
func (lim *Limiter) QueueTake(b *pgx.Batch, customerID string, l Limit) *Taken {
	maximum := lim.Max[l]
	if maximum <= 0 {
		return nil
	}
	now := lim.Clock.Now()
	start, end := window(l, now)
	taken := &Taken{}
	b.Queue(countSQL, countArgs(customerID, l, start, "", "")...).QueryRow(func(row pgx.Row) error {
		var n int
		if err := row.Scan(&n); err != nil {
			return fmt.Errorf("count velocity %s: %w", l.Name, err)
		}
		taken.read, taken.err = true, lim.judge(l, maximum, n, now, end)
		return nil
	})
	return taken
}

// count adds one to the counter of the window opening at start, drops
// holder's slot from it and card's approval (see Slots), and returns the
// new count. A row of an older window starts over, its slots dropped; one
// of a later window (a node whose clock ran ahead) keeps counting there.
func count(ctx context.Context, db pg.DBTX, customerID string, l Limit, start time.Time, holder, card string) (int, error) {
	var n int
	if err := db.QueryRow(ctx, countSQL, countArgs(customerID, l, start, holder, card)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count velocity %s: %w", l.Name, err)
	}
	return n, nil
}

const countSQL = `INSERT INTO velocity_counters AS v (customer_id, name, window_start, count)
		VALUES ($1, $2, $3, 1)
		ON CONFLICT (customer_id, name) DO UPDATE
		SET count = CASE WHEN v.window_start >= excluded.window_start THEN v.count + 1 ELSE 1 END,
			slots = CASE WHEN v.window_start >= excluded.window_start THEN array_remove(v.slots, $4) ELSE '{}' END,
			approved_slots = CASE WHEN v.window_start >= excluded.window_start THEN array_remove(v.approved_slots, $4) ELSE '{}' END,
			approved = v.approved - $5::text,
			window_start = greatest(v.window_start, excluded.window_start)
		RETURNING count`

func countArgs(customerID string, l Limit, start time.Time, holder, card string) []any {
	return []any{customerID, l.Name, start, holder, card}
}
