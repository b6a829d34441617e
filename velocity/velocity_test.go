package velocity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/velocity"
)

func TestTakeCountsCommittedActionsPerWindow(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 45, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Creations: 2}}
	take := func(customer string, commit bool) error {
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()
		if err := lim.Take(t.Context(), tx, customer, velocity.Creations); err != nil {
			return err
		}
		if commit {
			require.NoError(t, tx.Commit(t.Context()))
		}
		return nil
	}

	require.NoError(t, take("c1", false), "rolled back: counts nothing")
	require.NoError(t, take("c1", true))
	require.NoError(t, take("c1", true))
	err := take("c1", true)
	var exceeded *velocity.ExceededError
	require.True(t, errors.As(err, &exceeded), "%v", err)
	require.Equal(t, 15*time.Minute, exceeded.RetryAfter, "until the end of the clock hour")
	require.Equal(t, 900, exceeded.RetryAfterSeconds())
	require.NoError(t, take("c2", true), "another customer counts apart")

	clk.Advance(15 * time.Minute) // 10:00: a new window
	require.NoError(t, take("c1", true))
	require.NoError(t, take("c1", true))
	require.Error(t, take("c1", true))

	t.Run("an unlimited limit counts nothing", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			return lim.Take(t.Context(), tx, "c1", velocity.PaymentMethodChanges)
		}))
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM velocity_counters WHERE name = $1`,
			velocity.PaymentMethodChanges.Name).Scan(&n))
		require.Zero(t, n)
	})
}

// A count queued on a caller's batch counts as Take does, with the
// caller's statements after it in the same round trip: over the limit the
// batch still succeeds and the outcome carries the refusal.
func TestQueueTakeCountsAsTake(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 45, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Creations: 2}}
	take := func(customer string) error {
		return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			taken := lim.QueueTake(b, customer, velocity.Creations)
			var after int
			b.Queue(`SELECT 7`).QueryRow(func(row pgx.Row) error { return row.Scan(&after) })
			if err := tx.SendBatch(t.Context(), b).Close(); err != nil {
				return err
			}
			require.Equal(t, 7, after, "the statement after the count ran")
			return taken.Err()
		})
	}
	require.NoError(t, take("c1"))
	require.NoError(t, take("c1"))
	err := take("c1")
	var exceeded *velocity.ExceededError
	require.True(t, errors.As(err, &exceeded), "%v", err)
	require.Equal(t, 15*time.Minute, exceeded.RetryAfter)
	n, _ := slotsOf(t, pool, "c1", velocity.Creations)
	require.Equal(t, 2, n, "the refused count rolled back")

	t.Run("an outcome read before its batch was sent is an error", func(t *testing.T) {
		taken := lim.QueueTake(&pgx.Batch{}, "c3", velocity.Creations)
		require.Error(t, taken.Err())
	})
	t.Run("an unlimited limit queues nothing", func(t *testing.T) {
		b := &pgx.Batch{}
		taken := lim.QueueTake(b, "c1", velocity.PaymentMethodChanges)
		require.Zero(t, b.Len())
		require.NoError(t, taken.Err())
	})
	t.Run("a failed count is the batch's error", func(t *testing.T) {
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), `ALTER TABLE velocity_counters ADD CONSTRAINT refuse_all CHECK (count < 0) NOT VALID`); err != nil {
				return err
			}
			b := &pgx.Batch{}
			taken := lim.QueueTake(b, "c4", velocity.Creations)
			err := tx.SendBatch(t.Context(), b).Close()
			require.Error(t, taken.Err(), "not counted")
			return err
		})
		require.ErrorContains(t, err, "count velocity creations")
	})
}

// slotsOf reads customer's counter of l: the recorded count and the slots
// held.
func slotsOf(t *testing.T, pool *pgxpool.Pool, customer string, l velocity.Limit) (int, []string) {
	t.Helper()
	var n int
	var slots []string
	err := pool.QueryRow(t.Context(), `SELECT count, slots FROM velocity_counters WHERE customer_id = $1 AND name = $2`,
		customer, l.Name).Scan(&n, &slots)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	require.NoError(t, err)
	return n, slots
}

func reserve(t *testing.T, s *velocity.Slots, customer, holder string, force bool) velocity.Verdict {
	t.Helper()
	a, err := s.Reserve(t.Context(), customer, "", holder, force)
	require.NoError(t, err)
	return a.Verdict
}

// Calls reserving at once on two nodes (two Slots, each sending shared
// statements of its own) get no more slots than the maximum; the rest are
// told the slots are in flight, not that the limit is reached.
func TestSlotsGrantAtMostTheMaximumAcrossNodes(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 5}}
	nodes := []*velocity.Slots{velocity.NewSlots(lim, velocity.Declines, pool), velocity.NewSlots(lim, velocity.Declines, pool)}
	const calls = 40
	verdicts := make([]velocity.Verdict, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			customer := "c1"
			if i%4 == 3 {
				customer = "c2" // another customer in the same statements
			}
			a, err := nodes[i%2].Reserve(t.Context(), customer, "", fmt.Sprintf("charge-%d/1", i), false)
			if err == nil {
				verdicts[i] = a.Verdict
			}
		})
	}
	wg.Wait()
	granted := map[string]int{}
	for i, v := range verdicts {
		customer := "c1"
		if i%4 == 3 {
			customer = "c2"
		}
		switch v {
		case velocity.Granted:
			granted[customer]++
		case velocity.InFlight:
		default:
			t.Fatalf("call %d: %v", i, v)
		}
	}
	require.Equal(t, map[string]int{"c1": 5, "c2": 5}, granted)
	n, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Zero(t, n)
	require.Len(t, slots, 5)
}

// A slot is tied to its holder: asked again it is the same slot; an
// approval gives it back and a waiting call gets it; a decline turns it
// into the count; once the recorded declines reach the maximum the answer
// is Reached, except for a call that may already have been made.
func TestSlotsReleaseConvertAndReach(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 2}}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	decline := func(holder string) {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			return s.Decline(t.Context(), tx, "c1", "", holder)
		}))
	}

	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "a/1", false))
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "b/1", false))
	require.Equal(t, velocity.InFlight, reserve(t, s, "c1", "c/1", false))
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "a/1", false), "a retry of the same call keeps its slot")
	require.Equal(t, velocity.InFlight, reserve(t, s, "c1", "a/2", false), "another attempt is another call")
	_, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, []string{"a/1", "b/1"}, slots)

	require.NoError(t, s.Release(t.Context(), "c1", "", "a/1", false))
	require.NoError(t, s.Release(t.Context(), "c1", "", "a/1", false), "a second release changes nothing")
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "c/1", false), "the approval freed a slot")

	t.Run("a release rolled back gives nothing back", func(t *testing.T) {
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		require.NoError(t, s.ReleaseTx(t.Context(), tx, "c1", "", "c/1", false))
		require.NoError(t, tx.Rollback(t.Context()))
		_, slots := slotsOf(t, pool, "c1", velocity.Declines)
		require.Equal(t, []string{"b/1", "c/1"}, slots)
	})

	decline("b/1")
	n, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"c/1"}, slots, "the decline took its slot's place")
	require.Equal(t, velocity.InFlight, reserve(t, s, "c1", "d/1", false), "one decline and one call in flight")
	decline("c/1")
	require.Equal(t, velocity.Reached, reserve(t, s, "c1", "d/1", false))
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "e/1", true), "a call that may have been made is not held back")
	decline("")
	n, slots = slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, 3, n, "a decline without a slot counts too")
	require.Equal(t, []string{"e/1"}, slots)
}

// A new UTC day drops the slots and the count of the day before: a slot
// whose caller died does not outlive its day, and a late release or
// decline of a past day's slot takes nothing from the new day.
func TestSlotsOfPastDaysAreDropped(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 2}}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "dead/1", false)) // its caller dies here
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "late/1", false))
	a, err := s.Reserve(t.Context(), "c1", "", "waiting/1", false)
	require.NoError(t, err)
	require.Equal(t, velocity.InFlight, a.Verdict)
	require.Equal(t, time.Hour, a.WindowLeft, "a wait need not outlast the day")

	clk.Advance(time.Hour) // midnight UTC
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "waiting/1", false))
	_, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, []string{"waiting/1"}, slots, "yesterday's slots were dropped")
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return s.Decline(t.Context(), tx, "c1", "", "late/1")
	}))
	require.NoError(t, s.Release(t.Context(), "c1", "", "dead/1", false))
	n, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, 1, n, "a decline counts in the day it is recorded")
	require.Equal(t, []string{"waiting/1"}, slots)
	require.Equal(t, velocity.InFlight, reserve(t, s, "c1", "next/1", false))
}

// With no maximum, every call is granted and nothing is stored.
func TestSlotsUnlimited(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	lim := &velocity.Limiter{Clock: testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	for i := range 10 {
		require.Equal(t, velocity.Granted, reserve(t, s, "c1", fmt.Sprintf("x/%d", i), false))
	}
	require.NoError(t, s.Release(t.Context(), "c1", "", "x/1", false))
	n, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Zero(t, n)
	require.Empty(t, slots)
}

// The sweep gives back the slots whose holder ended says is no longer in
// flight, and keeps the others and the recorded count.
func TestSweepGivesBackSlotsOfEndedCalls(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 3}}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "live", false))
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "ended", false))
	require.Equal(t, velocity.Granted, reserve(t, s, "c2", "ended-too", false))
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return s.Decline(t.Context(), tx, "c1", "", "")
	}))
	require.Equal(t, velocity.InFlight, reserve(t, s, "c1", "waiting", false), "one decline and two slots: none left")

	var asked []string
	n, err := s.Sweep(t.Context(), pool, func(_ context.Context, _ pgx.Tx, holders []string) ([]string, error) {
		asked = append(asked, holders...)
		return slices.DeleteFunc(slices.Clone(holders), func(h string) bool { return h == "live" }), nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.ElementsMatch(t, []string{"live", "ended", "ended-too"}, asked)
	count, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, 1, count, "the sweep counts no decline")
	require.Equal(t, []string{"live"}, slots)
	_, slots = slotsOf(t, pool, "c2", velocity.Declines)
	require.Empty(t, slots)
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "waiting", false), "the slot given back is the waiting call's")

	t.Run("an error changes nothing", func(t *testing.T) {
		_, err := s.Sweep(t.Context(), pool, func(context.Context, pgx.Tx, []string) ([]string, error) {
			return nil, errors.New("charges unreachable")
		})
		require.Error(t, err)
		_, slots := slotsOf(t, pool, "c1", velocity.Declines)
		require.ElementsMatch(t, []string{"live", "waiting"}, slots)
	})
}

// The sweep locks the counters before it asks which calls ended: a
// reservation made meanwhile waits for it and then finds the slot it gave
// back, rather than being told the slots are all in flight.
func TestSweepOrdersWithReservations(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: 1}}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	require.Equal(t, velocity.Granted, reserve(t, s, "c1", "ended", false))

	asking, answer := make(chan struct{}), make(chan struct{})
	swept := make(chan error, 1)
	go func() {
		_, err := s.Sweep(context.Background(), pool, func(context.Context, pgx.Tx, []string) ([]string, error) {
			close(asking)
			<-answer
			return []string{"ended"}, nil
		})
		swept <- err
	}()
	<-asking
	reserved := make(chan velocity.Verdict, 1)
	go func() {
		a, err := s.Reserve(context.Background(), "c1", "", "next", false)
		if err != nil {
			a.Verdict = 0
		}
		reserved <- a.Verdict
	}()
	// The reservation waits on the counter the sweep locked.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO velocity_counters%'`).Scan(&waiting))
		return waiting == 1
	}, 10*time.Second, 10*time.Millisecond)
	close(answer)
	require.NoError(t, <-swept)
	require.Equal(t, velocity.Granted, <-reserved)
	_, slots := slotsOf(t, pool, "c1", velocity.Declines)
	require.Equal(t, []string{"next"}, slots)
}
