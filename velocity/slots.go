package velocity

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/platform/groupcommit"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/platform/riverjob"
)

// Verdict answers a request for a slot.
type Verdict int

const (
	// Granted: the slot is the holder's (newly, or again: a holder that
	// already holds one in the window keeps it).
	Granted Verdict = iota + 1
	// InFlight: the window's recorded events are under the maximum, but
	// the slots left are held by calls still in flight. Wait: an approval
	// among them gives its slot back.
	InFlight
	// Reached: the window's recorded events reached the maximum.
	Reached
)

func (v Verdict) String() string {
	switch v {
	case Granted:
		return "granted"
	case InFlight:
		return "in_flight"
	case Reached:
		return "reached"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Answer is a verdict and how long the window it was given in lasts: its
// slots are dropped then, so a wait never needs to be longer.
type Answer struct {
	Verdict    Verdict
	WindowLeft time.Duration
}

// Slots reserves and gives back slots of one limit for calls whose
// outcome counts against it (see the package doc). Each holder is one
// call, such as a charge's attempt: asked again, it gets its own slot
// back, so a retry of the same call never takes a second one.
//
// Reservations and releases made at the same time share one statement
// each (group commit), so a batch of calls costs one statement, not one
// per call.
type Slots struct {
	lim     *Limiter
	limit   Limit
	db      pg.DBTX
	reserve groupcommit.Batcher[*slotCall]
	release groupcommit.Batcher[*slotCall]
}

// slotBatchLimit bounds the calls of one statement.
const slotBatchLimit = 500

// slotBatchTimeout bounds one shared statement.
const slotBatchTimeout = 30 * time.Second

type slotCall struct {
	customerID string
	holder     string
	force      bool
	answer     Answer
}

// NewSlots returns the slots of l under lim's maximum, kept in db (a
// pool: the shared statements run on their own).
func NewSlots(lim *Limiter, l Limit, db pg.DBTX) *Slots {
	s := &Slots{lim: lim, limit: l, db: db}
	s.reserve = groupcommit.Batcher[*slotCall]{Limit: slotBatchLimit, Timeout: slotBatchTimeout, Send: s.reserveBatch}
	s.release = groupcommit.Batcher[*slotCall]{Limit: slotBatchLimit, Timeout: slotBatchTimeout, Send: s.releaseBatch}
	return s
}

// Reserve asks for a slot for holder, a call of customerID about to be
// made. force grants it whatever the count: for a call that may already
// have been made, which holding back would not undo.
func (s *Slots) Reserve(ctx context.Context, customerID, holder string, force bool) (Answer, error) {
	c := &slotCall{customerID: customerID, holder: holder, force: force}
	if err := s.reserve.Do(ctx, c); err != nil {
		return Answer{}, err
	}
	return c.answer, nil
}

// Release gives holder's slot back, if it holds one: its call's outcome
// does not count (an approval).
func (s *Slots) Release(ctx context.Context, customerID, holder string) error {
	return s.release.Do(ctx, &slotCall{customerID: customerID, holder: holder})
}

// ReleaseTx is Release in tx, with the outcome it goes with.
func (s *Slots) ReleaseTx(ctx context.Context, tx pg.DBTX, customerID, holder string) error {
	if s.lim.Max[s.limit] <= 0 {
		return nil
	}
	return releaseSlots(ctx, tx, s.limit, []string{customerID}, []string{holder})
}

// reserveBatch reserves the slots of batch in one statement. Per
// customer, the calls that may already have been made come first (they
// are granted anyway), then the others in the order they asked. The
// statement locks the counters in the order of their customers, so two
// batches sharing customers wait for each other and never deadlock, and a
// counter locked by another transaction is read again at its latest
// version once that one ends: of the calls of every node, no more than
// the maximum are granted.
func (s *Slots) reserveBatch(ctx context.Context, batch []*slotCall) error {
	maximum := s.lim.Max[s.limit]
	now := s.lim.Clock.Now()
	start, end := window(s.limit, now)
	if maximum <= 0 {
		for _, c := range batch {
			c.answer = Answer{Verdict: Granted, WindowLeft: end.Sub(now)}
		}
		return nil
	}
	customers, holders, forces := make([]string, 0, len(batch)), make([]string, 0, len(batch)), make([]bool, 0, len(batch))
	seen := make(map[[2]string]bool, len(batch))
	for _, c := range batch {
		key := [2]string{c.customerID, c.holder}
		if seen[key] {
			continue // the same call asking twice in one batch: one slot
		}
		seen[key] = true
		customers, holders, forces = append(customers, c.customerID), append(holders, c.holder), append(forces, c.force)
	}
	rows, err := s.db.Query(ctx, `WITH asked AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS a(customer_id, holder, force, ord)
		), per AS (
			SELECT customer_id, array_agg(holder ORDER BY force DESC, ord) AS wanted, count(*) FILTER (WHERE force)::int AS forced
			FROM asked GROUP BY customer_id
		)
		INSERT INTO velocity_counters AS v (customer_id, name, window_start, count, slots)
		SELECT customer_id, $4, $5, 0, wanted[1:greatest(forced, $6)] FROM per ORDER BY customer_id
		ON CONFLICT (customer_id, name) DO UPDATE SET
			count = CASE WHEN v.window_start >= excluded.window_start THEN v.count ELSE 0 END,
			slots = (SELECT w.held || ARRAY(
					SELECT holder FROM (
						SELECT holder, i, row_number() OVER (ORDER BY i) AS k
						FROM unnest(p.wanted) WITH ORDINALITY AS u(holder, i) WHERE holder <> ALL(w.held)) n
					WHERE n.i <= p.forced OR cardinality(w.held) + w.recorded + n.k <= $6
					ORDER BY n.i)
				FROM per p, LATERAL (SELECT
					CASE WHEN v.window_start >= excluded.window_start THEN v.slots ELSE '{}' END AS held,
					CASE WHEN v.window_start >= excluded.window_start THEN v.count ELSE 0 END AS recorded) w
				WHERE p.customer_id = excluded.customer_id),
			window_start = greatest(v.window_start, excluded.window_start)
		RETURNING customer_id, count, slots`,
		customers, holders, forces, s.limit.Name, start, maximum)
	if err != nil {
		return fmt.Errorf("reserve velocity slots %s: %w", s.limit.Name, err)
	}
	defer rows.Close()
	type counter struct {
		count int
		slots []string
	}
	counters := make(map[string]counter, len(batch))
	for rows.Next() {
		var customer string
		var c counter
		if err := rows.Scan(&customer, &c.count, &c.slots); err != nil {
			return fmt.Errorf("reserve velocity slots %s: %w", s.limit.Name, err)
		}
		counters[customer] = c
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reserve velocity slots %s: %w", s.limit.Name, err)
	}
	for _, c := range batch {
		counted, ok := counters[c.customerID]
		if !ok {
			return fmt.Errorf("reserve velocity slots %s: no counter came back for a customer", s.limit.Name)
		}
		c.answer.WindowLeft = end.Sub(now)
		switch {
		case slices.Contains(counted.slots, c.holder):
			c.answer.Verdict = Granted
		case counted.count >= maximum:
			c.answer.Verdict = Reached
		default:
			c.answer.Verdict = InFlight
		}
	}
	return nil
}

func (s *Slots) releaseBatch(ctx context.Context, batch []*slotCall) error {
	if s.lim.Max[s.limit] <= 0 {
		return nil
	}
	customers, holders := make([]string, len(batch)), make([]string, len(batch))
	for i, c := range batch {
		customers[i], holders[i] = c.customerID, c.holder
	}
	return releaseSlots(ctx, s.db, s.limit, customers, holders)
}

// releaseSlots drops the holders' slots from their customers' counters,
// locked in the order of their customers (as reservations lock them). A
// holder that holds none, or whose window is over, changes nothing.
func releaseSlots(ctx context.Context, db pg.DBTX, l Limit, customers, holders []string) error {
	_, err := db.Exec(ctx, `WITH released AS (
			SELECT customer_id, array_agg(holder) AS holders
			FROM unnest($1::text[], $2::text[]) AS r(customer_id, holder) GROUP BY customer_id
		)
		UPDATE velocity_counters v
		SET slots = ARRAY(SELECT s FROM unnest(v.slots) WITH ORDINALITY AS u(s, i) WHERE s <> ALL(locked.holders) ORDER BY i)
		FROM (SELECT c.customer_id, r.holders FROM velocity_counters c JOIN released r USING (customer_id)
			WHERE c.name = $3 AND c.slots && r.holders ORDER BY c.customer_id FOR UPDATE OF c) locked
		WHERE v.customer_id = locked.customer_id AND v.name = $3`,
		customers, holders, l.Name)
	if err != nil {
		return fmt.Errorf("release velocity slots %s: %w", l.Name, err)
	}
	return nil
}

// Ended names, of the holders given, those whose call is no longer in
// flight, read in tx (the sweep's). It belongs to whoever names the
// holders: velocity knows them only as strings.
type Ended func(ctx context.Context, tx pgx.Tx, holders []string) ([]string, error)

// sweepBatch bounds the counters one sweep transaction locks.
const sweepBatch = 500

// Sweep gives back every slot whose holder ended says is no longer in
// flight, and returns how many. Each path that ends a call settles its
// slot itself (an approval gives it back, a decline turns it into the
// count); the sweep catches those that ended without a word to the slots
// (a job River discarded, a charge the inspector sent to review, a step
// whose release failed), which would otherwise hold the slot until the
// window ends and keep the customer's other calls waiting. A decline is
// never missed by it: the transaction that records one turns the slot
// into the count, so a slot left behind was not a decline's.
//
// Each batch locks its counters first (skipping those a reservation holds
// now) and asks ended after: a reservation for a holder that is in flight
// again after ended read it waits for the sweep and takes its slot anew.
func (s *Slots) Sweep(ctx context.Context, pool *pgxpool.Pool, ended Ended) (int, error) {
	if s.lim.Max[s.limit] <= 0 {
		return 0, nil
	}
	released, after := 0, ""
	for {
		var n, locked int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			n, locked, after, err = s.sweepBatch(ctx, tx, after, ended)
			return err
		})
		if err != nil {
			return released, err
		}
		released += n
		if locked < sweepBatch {
			return released, nil
		}
	}
}

// sweepBatch sweeps the counters after the customer after, and returns
// how many slots it gave back, how many counters it locked and the last
// customer.
func (s *Slots) sweepBatch(ctx context.Context, tx pgx.Tx, after string, ended Ended) (released, locked int, last string, err error) {
	rows, err := tx.Query(ctx, `SELECT customer_id, slots FROM velocity_counters
		WHERE name = $1 AND slots <> '{}' AND customer_id > $2
		ORDER BY customer_id LIMIT $3 FOR UPDATE SKIP LOCKED`, s.limit.Name, after, sweepBatch)
	if err != nil {
		return 0, 0, "", fmt.Errorf("sweep velocity slots %s: %w", s.limit.Name, err)
	}
	customerOf := map[string]string{}
	var holders []string
	var customer string
	var slots []string
	if _, err := pgx.ForEachRow(rows, []any{&customer, &slots}, func() error {
		locked, last = locked+1, customer
		for _, h := range slots {
			customerOf[h] = customer
			holders = append(holders, h)
		}
		return nil
	}); err != nil {
		return 0, 0, "", fmt.Errorf("sweep velocity slots %s: %w", s.limit.Name, err)
	}
	if len(holders) == 0 {
		return 0, locked, last, nil
	}
	gone, err := ended(ctx, tx, holders)
	if err != nil {
		return 0, 0, "", fmt.Errorf("sweep velocity slots %s: %w", s.limit.Name, err)
	}
	if len(gone) == 0 {
		return 0, locked, last, nil
	}
	customers := make([]string, 0, len(gone))
	for _, h := range gone {
		customers = append(customers, customerOf[h])
	}
	if err := releaseSlots(ctx, tx, s.limit, customers, gone); err != nil {
		return 0, 0, "", err
	}
	return len(gone), locked, last, nil
}

// SweepArgs is the periodic job that runs [Slots.Sweep].
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "velocity_sweep" }

// InsertOpts allows one pending or running sweep.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: riverjob.OneAtATime()}
}

// SweepWorker runs SweepArgs.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Pool   *pgxpool.Pool
	Slots  *Slots
	Ended  Ended
	Logger zerolog.Logger
}

// Work sweeps the slots.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	n, err := w.Slots.Sweep(ctx, w.Pool, w.Ended)
	if n > 0 {
		w.Logger.Info().Int("slots", n).Str("limit", w.Slots.limit.Name).Msg("velocity slots of calls no longer in flight given back")
	}
	return err
}

// SweepJob runs the sweep every interval, first at start.
func SweepJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})
}
