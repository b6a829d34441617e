package velocity

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
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
// # Approved cards
//
// Each call names the card it is made with (an opaque digest; see
// [Slots.Reserve]). A card approved within [ApprovalLasts] (a call made
// with it gave its slot back as approved) is known to be good: its calls
// take their slots from a pool of ApprovedInFlight of its own, so a
// customer's many calls on a good card are not held to the maximum. A
// declined call clears its card's approval, in the statement that counts
// the decline: from then on the card is held as a new one. With M the
// maximum, A ApprovedInFlight, R the window's recorded events, S the
// slots held and F those of them from the approved pool, a slot is
// granted, under the counter's row lock,
//   - from the approved pool, to a call on an approved card, while
//     R + S − F < M and F < A;
//   - from the maximum, to any call (one on an approved card whose pool
//     is full too), while R + S < M.
//
// The calls granted from the maximum that turn into events number at
// most M in a window (each grant leaves those events plus S − F at most
// M, and F's slots are not among them), so card testing, which needs new
// cards, still meets the maximum. All the window's events from calls
// granted number at most M − 1 + A: at the last grant, R + S is at most M
// (a grant from the maximum) or M − 1 + A (from the approved pool), and
// every event after it is one of those S slots. Twenty calls at once on
// an approved card that all decline: max(M, min(20, A)) are made, the
// rest wait and then find the maximum reached.
//
// # Waiting
//
// A call told its slots are in flight waits as a River job ([Slots.Wait],
// in the transaction that snoozes the job): the job's id joins the
// customer's waiters. Whatever gives a slot back (an approval, a decline
// of an approved card's call, the sweep) or reaches the maximum makes the
// oldest waiters available at once, as many as there are slots free (all
// of them once the maximum is reached: they go to review), in the same
// transaction: a waiter is woken when it can go on, not on a timer.
//
// Reservations and releases made at the same time share one statement
// each (group commit), so a batch of calls costs one statement, not one
// per call.
type Slots struct {
	lim   *Limiter
	limit Limit
	db    batchDB
	// ApprovedInFlight is the pool of slots of a customer's calls on
	// approved cards (see above); 0 holds approved cards as the others.
	ApprovedInFlight int
	reserve          groupcommit.Batcher[*slotCall]
	release          groupcommit.Batcher[*slotCall]
}

// ApprovalLasts is how long an approved card stays approved without
// another approval.
const ApprovalLasts = 30 * 24 * time.Hour

// slotBatchLimit bounds the calls of one statement.
const slotBatchLimit = 500

// slotBatchTimeout bounds one shared statement.
const slotBatchTimeout = 30 * time.Second

type slotCall struct {
	customerID string
	card       string
	holder     string
	force      bool
	approved   bool
	answer     Answer
}

// NewSlots returns the slots of l under lim's maximum, kept in db (a
// pool: the shared statements run on their own).
func NewSlots(lim *Limiter, l Limit, db batchDB) *Slots {
	s := &Slots{lim: lim, limit: l, db: db}
	s.reserve = groupcommit.Batcher[*slotCall]{Limit: slotBatchLimit, Timeout: slotBatchTimeout, Send: s.reserveBatch}
	s.release = groupcommit.Batcher[*slotCall]{Limit: slotBatchLimit, Timeout: slotBatchTimeout, Send: s.releaseBatch}
	return s
}

// Reserve asks for a slot for holder, a call of customerID about to be
// made with card (an opaque name of the card, such as a keyed digest:
// it is stored, so never a secret itself; "" names no card). force grants
// it whatever the count: for a call that may already have been made,
// which holding back would not undo.
func (s *Slots) Reserve(ctx context.Context, customerID, card, holder string, force bool) (Answer, error) {
	c := &slotCall{customerID: customerID, card: card, holder: holder, force: force}
	if err := s.reserve.Do(ctx, c); err != nil {
		return Answer{}, err
	}
	return c.answer, nil
}

// Wait asks again, in tx, for a slot for holder, which Reserve told the
// slots are in flight, and when there is still none makes waiter (the
// River job of the call, which tx snoozes) one of the customer's waiters,
// woken when a slot frees. Asking and joining the waiters in the
// transaction that snoozes the job means a slot given back after it is
// seen by a job already snoozed: no wake-up is lost to a job still
// running.
func (s *Slots) Wait(ctx context.Context, tx pgx.Tx, customerID, card, holder string, waiter int64) (Answer, error) {
	c := &slotCall{customerID: customerID, card: card, holder: holder}
	if err := s.reserveIn(ctx, tx, []*slotCall{c}); err != nil {
		return Answer{}, err
	}
	if c.answer.Verdict != InFlight {
		return c.answer, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE velocity_counters SET waiters = waiters || $3::bigint
		WHERE customer_id = $1 AND name = $2 AND NOT ($3::bigint = ANY(waiters))`, customerID, s.limit.Name, waiter); err != nil {
		return Answer{}, fmt.Errorf("wait for a velocity slot %s: %w", s.limit.Name, err)
	}
	return c.answer, nil
}

// Release gives holder's slot back, if it holds one: its call's outcome
// does not count. approved says the call was approved: its card is then
// approved (see Slots).
func (s *Slots) Release(ctx context.Context, customerID, card, holder string, approved bool) error {
	return s.release.Do(ctx, &slotCall{customerID: customerID, card: card, holder: holder, approved: approved})
}

// ReleaseTx is Release in tx, with the outcome it goes with.
func (s *Slots) ReleaseTx(ctx context.Context, tx pgx.Tx, customerID, card, holder string, approved bool) error {
	if s.lim.Max[s.limit] <= 0 {
		return nil
	}
	b := &pgx.Batch{}
	s.queueRelease(b, []*slotCall{{customerID: customerID, card: card, holder: holder, approved: approved}})
	return sendBatch(ctx, tx, b, "release velocity slots "+s.limit.Name)
}

// Decline records one event (a decline) of customerID's call with card
// in tx, which records the call's outcome, without refusing anything:
// holder's slot, if it holds one in the window, becomes the count, and
// the card is approved no longer. The waiters are woken if the maximum is
// reached (they go on to hear it) or a slot of the approved pool freed.
func (s *Slots) Decline(ctx context.Context, tx pgx.Tx, customerID, card, holder string) error {
	if s.lim.Max[s.limit] <= 0 {
		return nil
	}
	start, _ := window(s.limit, s.lim.Clock.Now())
	if _, err := count(ctx, tx, customerID, s.limit, start, holder, card); err != nil {
		return err
	}
	return s.wake(ctx, tx, []string{customerID})
}

// reserveBatch reserves the slots of batch in one statement.
func (s *Slots) reserveBatch(ctx context.Context, batch []*slotCall) error {
	return s.reserveIn(ctx, s.db, batch)
}

// reserveIn reserves the slots of batch in one statement on db. Per
// customer, the calls that may already have been made come first (they
// are granted anyway), then those on approved cards from their pool, then
// the others, with those of approved cards the pool had no room for, from
// the pool of every card, each in the order they asked: every grant meets
// its rule (see Slots) at its place in that order. The statement locks the counters in the order of
// their customers, so two batches sharing customers wait for each other
// and never deadlock, and a counter locked by another transaction is read
// again at its latest version once that one ends: of the calls of every
// node, no more than the rules allow are granted.
func (s *Slots) reserveIn(ctx context.Context, db batchDB, batch []*slotCall) error {
	maximum := s.lim.Max[s.limit]
	now := s.lim.Clock.Now()
	start, end := window(s.limit, now)
	if maximum <= 0 {
		for _, c := range batch {
			c.answer = Answer{Verdict: Granted, WindowLeft: end.Sub(now)}
		}
		return nil
	}
	customers, holders := make([]string, 0, len(batch)), make([]string, 0, len(batch))
	forces, cards := make([]bool, 0, len(batch)), make([]string, 0, len(batch))
	seen := make(map[[2]string]bool, len(batch))
	for _, c := range batch {
		key := [2]string{c.customerID, c.holder}
		if seen[key] {
			continue // the same call asking twice in one batch: one slot
		}
		seen[key] = true
		customers, holders = append(customers, c.customerID), append(holders, c.holder)
		forces, cards = append(forces, c.force), append(cards, c.card)
	}
	rows, err := db.Query(ctx, `WITH asked AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::text[]) WITH ORDINALITY AS a(customer_id, holder, force, card, ord)
		), per AS (
			SELECT customer_id, array_agg(holder ORDER BY force DESC, ord) AS wanted, array_agg(card ORDER BY force DESC, ord) AS cards,
				count(*) FILTER (WHERE force)::int AS forced
			FROM asked GROUP BY customer_id
		)
		INSERT INTO velocity_counters AS v (customer_id, name, window_start, count, slots)
		SELECT customer_id, $5, $6, 0, wanted[1:greatest(forced, $7)] FROM per ORDER BY customer_id
		ON CONFLICT (customer_id, name) DO UPDATE SET
			count = CASE WHEN v.window_start >= excluded.window_start THEN v.count ELSE 0 END,
			(slots, approved_slots) = (SELECT
					w.held || coalesce(array_agg(g.holder ORDER BY g.i) FILTER (WHERE g.granted), '{}'),
					w.fheld || coalesce(array_agg(g.holder ORDER BY g.i) FILTER (WHERE g.granted AND g.fast), '{}')
				FROM per p
				CROSS JOIN LATERAL (SELECT
					CASE WHEN v.window_start >= excluded.window_start THEN v.slots ELSE '{}' END AS held,
					CASE WHEN v.window_start >= excluded.window_start THEN v.approved_slots ELSE '{}' END AS fheld,
					CASE WHEN v.window_start >= excluded.window_start THEN v.count ELSE 0 END AS recorded) w
				LEFT JOIN LATERAL (
					SELECT m.holder, m.i, m.fast_granted OR (m.forced AND m.fast) AS fast, m.forced OR m.fast_granted
						OR (NOT m.forced AND NOT m.fast_granted AND w.recorded + m.s1 + m.gf
							+ row_number() OVER (PARTITION BY m.forced OR m.fast_granted ORDER BY m.i) <= $7) AS granted
					FROM (SELECT n.*, count(*) FILTER (WHERE n.fast_granted) OVER () AS gf
						FROM (SELECT c.*, cardinality(w.held) + count(*) FILTER (WHERE c.forced) OVER () AS s1,
								NOT c.forced AND c.fast AND w.recorded + cardinality(w.held) + count(*) FILTER (WHERE c.forced) OVER ()
									- cardinality(w.fheld) - count(*) FILTER (WHERE c.forced AND c.fast) OVER () < $7
								AND cardinality(w.fheld) + count(*) FILTER (WHERE c.forced AND c.fast) OVER ()
									+ row_number() OVER (PARTITION BY c.forced, c.fast ORDER BY c.i) <= $8 AS fast_granted
							FROM (SELECT u.holder, u.i, u.i <= p.forced AS forced,
									$8 > 0 AND coalesce((v.approved ->> u.card)::timestamptz > $9, false) AS fast
								FROM unnest(p.wanted, p.cards) WITH ORDINALITY AS u(holder, card, i)
								WHERE u.holder <> ALL(w.held)) c) n) m) g ON true
				WHERE p.customer_id = excluded.customer_id
				GROUP BY w.held, w.fheld),
			window_start = greatest(v.window_start, excluded.window_start)
		RETURNING customer_id, count, slots`,
		customers, holders, forces, cards, s.limit.Name, start, maximum, s.ApprovedInFlight, now.Add(-ApprovalLasts))
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

// releaseBatch gives back the slots of batch and wakes the waiters they
// free, in one round trip (the two statements of a batch are one
// transaction).
func (s *Slots) releaseBatch(ctx context.Context, batch []*slotCall) error {
	if s.lim.Max[s.limit] <= 0 {
		return nil
	}
	b := &pgx.Batch{}
	s.queueRelease(b, batch)
	return sendBatch(ctx, s.db, b, "release velocity slots "+s.limit.Name)
}

// queueRelease queues, in b, the statement that drops the holders' slots
// from their customers' counters, locked in the order of their customers
// (as reservations lock them), and approves the cards of the approved
// calls (dropping approvals past ApprovalLasts); then the one that wakes
// the waiters. A holder that holds none, or whose window is over, gives
// nothing back.
func (s *Slots) queueRelease(b *pgx.Batch, calls []*slotCall) {
	now := s.lim.Clock.Now()
	customers, holders := make([]string, len(calls)), make([]string, len(calls))
	cards, approved := make([]string, len(calls)), make([]bool, len(calls))
	for i, c := range calls {
		customers[i], holders[i], cards[i] = c.customerID, c.holder, c.card
		approved[i] = c.approved && c.card != "" && s.ApprovedInFlight > 0
	}
	b.Queue(`WITH released AS (
			SELECT customer_id, array_agg(holder) AS holders, array_agg(card) FILTER (WHERE approved) AS cards
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[]) AS r(customer_id, holder, card, approved) GROUP BY customer_id
		)
		UPDATE velocity_counters v
		SET slots = ARRAY(SELECT s FROM unnest(v.slots) WITH ORDINALITY AS u(s, i) WHERE s <> ALL(locked.holders) ORDER BY i),
			approved_slots = ARRAY(SELECT s FROM unnest(v.approved_slots) WITH ORDINALITY AS u(s, i) WHERE s <> ALL(locked.holders) ORDER BY i),
			approved = CASE WHEN locked.cards IS NULL THEN v.approved ELSE
				(SELECT coalesce(jsonb_object_agg(a.key, a.value), '{}') FROM jsonb_each(v.approved) AS a
					WHERE (a.value #>> '{}')::timestamptz > $6)
				|| (SELECT jsonb_object_agg(card, to_jsonb($7::timestamptz)) FROM unnest(locked.cards) AS card) END
		FROM (SELECT c.customer_id, r.holders, r.cards FROM velocity_counters c JOIN released r USING (customer_id)
			WHERE c.name = $5 AND (c.slots && r.holders OR r.cards IS NOT NULL) ORDER BY c.customer_id FOR UPDATE OF c) locked
		WHERE v.customer_id = locked.customer_id AND v.name = $5`,
		customers, holders, cards, approved, s.limit.Name, now.Add(-ApprovalLasts), now)
	s.queueWake(b, customers)
}

// wake wakes the waiters of customers that can go on, in tx.
func (s *Slots) wake(ctx context.Context, tx pgx.Tx, customers []string) error {
	b := &pgx.Batch{}
	s.queueWake(b, customers)
	return sendBatch(ctx, tx, b, "wake velocity waiters "+s.limit.Name)
}

// queueWake queues, in b, the statement that makes available the River
// jobs of the oldest waiters of customers, as many as there are slots
// free for them to take (every one once the recorded events reached the
// maximum: they go on to hear it), and drops from the waiters those woken
// and those whose job ended. It runs after whatever freed the slots, in
// its transaction: their counters are locked already, so their waiters
// are the latest, and the jobs' rows are updated at their latest version
// (a job snoozed by a transaction that committed meanwhile is woken). A
// waiter whose job is running (it went on by itself, or is asking
// again) is kept: it leaves the waiters when it no longer waits. The
// woken jobs' queues get River's notification of jobs inserted, at
// commit, so that the nodes fetch them now rather than at their next
// poll (REBILL_FETCH_POLL_INTERVAL). The
// slots free are a hint, not a grant: a waiter woken asks again and
// waits again if another call took the slot first.
func (s *Slots) queueWake(b *pgx.Batch, customers []string) {
	now := s.lim.Clock.Now()
	start, _ := window(s.limit, now)
	b.Queue(`WITH locked AS (
			SELECT c.customer_id, c.waiters,
				CASE WHEN f.recorded >= $3 THEN cardinality(c.waiters)
				ELSE greatest($3 - f.recorded - cardinality(f.held), 0)
					+ CASE WHEN $4 > 0 AND f.recorded + cardinality(f.held) - cardinality(f.fheld) < $3
							AND EXISTS (SELECT FROM jsonb_each_text(c.approved) AS a WHERE a.value::timestamptz > $6)
						THEN greatest($4 - cardinality(f.fheld), 0) ELSE 0 END
				END AS free
			FROM velocity_counters c, LATERAL (SELECT
				CASE WHEN c.window_start >= $5 THEN c.count ELSE 0 END AS recorded,
				CASE WHEN c.window_start >= $5 THEN c.slots ELSE '{}' END AS held,
				CASE WHEN c.window_start >= $5 THEN c.approved_slots ELSE '{}' END AS fheld) f
			WHERE c.name = $1 AND c.customer_id = ANY($2::text[]) AND c.waiters <> '{}'
			ORDER BY c.customer_id FOR UPDATE OF c
		), waiting AS (
			SELECT l.customer_id, w.job, w.i, l.free, j.state::text AS state,
				row_number() OVER (PARTITION BY l.customer_id, j.state::text = ANY($7) ORDER BY w.i) AS r
			FROM locked l CROSS JOIN LATERAL unnest(l.waiters) WITH ORDINALITY AS w(job, i)
			LEFT JOIN river_job j ON j.id = w.job
		), chosen AS (
			SELECT job FROM waiting WHERE state = ANY($7) AND r <= free
		), woken AS (
			UPDATE river_job SET state = $9::text::river_job_state, scheduled_at = least(scheduled_at, now())
			WHERE id IN (SELECT job FROM chosen) AND state::text = ANY($7)
			RETURNING id, queue
		), kept AS (
			UPDATE velocity_counters v SET waiters = ARRAY(SELECT w.job FROM waiting w
				WHERE w.customer_id = v.customer_id AND w.state = ANY($8)
					AND w.job NOT IN (SELECT job FROM chosen)
				ORDER BY w.i)
			FROM locked l WHERE v.customer_id = l.customer_id AND v.name = $1
			RETURNING v.customer_id
		)
		SELECT (SELECT count(*) FROM kept), (SELECT count(pg_notify('river_insert', json_build_object('queue', q.queue)::text))
			FROM (SELECT DISTINCT queue FROM woken) q)`,
		s.limit.Name, customers, s.lim.Max[s.limit], s.ApprovedInFlight, start, now.Add(-ApprovalLasts),
		jobStates(waitingJob), jobStates(liveJob), string(rivertype.JobStateAvailable))
}

// waitingJob are the states of a waiter's job that waits (snoozed: River
// makes a short snooze available with its time ahead); liveJob those of
// one that has not ended.
var (
	waitingJob = []rivertype.JobState{rivertype.JobStateScheduled, rivertype.JobStateAvailable}
	liveJob    = []rivertype.JobState{rivertype.JobStateScheduled, rivertype.JobStateAvailable, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStatePending}
)

func jobStates(states []rivertype.JobState) []string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return out
}

// batchDB is a pool or a transaction: what sends a batch of statements.
type batchDB interface {
	pg.DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendBatch sends b on db and reads every result.
func sendBatch(ctx context.Context, db batchDB, b *pgx.Batch, what string) error {
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// releaseSlots drops the holders' slots from their customers' counters,
// locked in the order of their customers (as reservations lock them), and
// wakes the waiters, in tx. A holder that holds none, or whose window is
// over, changes nothing.
func (s *Slots) releaseSlots(ctx context.Context, tx pgx.Tx, customers, holders []string) error {
	calls := make([]*slotCall, len(customers))
	for i := range customers {
		calls[i] = &slotCall{customerID: customers[i], holder: holders[i]}
	}
	b := &pgx.Batch{}
	s.queueRelease(b, calls)
	return sendBatch(ctx, tx, b, "release velocity slots "+s.limit.Name)
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
	if err := s.releaseSlots(ctx, tx, customers, gone); err != nil {
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
