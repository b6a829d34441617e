package velocity_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/velocity"
)

// approvedSlots is a declines limit of maximum a day with a pool of
// approved slots for approved cards.
func approvedSlots(t *testing.T, pool *pgxpool.Pool, maximum, approved int) (*velocity.Slots, *testsupport.Clock) {
	t.Helper()
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: maximum}}
	s := velocity.NewSlots(lim, velocity.Declines, pool)
	s.ApprovedInFlight = approved
	return s, clk
}

func reserveCard(t *testing.T, s *velocity.Slots, customer, card, holder string) velocity.Verdict {
	t.Helper()
	a, err := s.Reserve(t.Context(), customer, card, holder, false)
	require.NoError(t, err)
	return a.Verdict
}

func decline(t *testing.T, pool *pgxpool.Pool, s *velocity.Slots, customer, card, holder string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return s.Decline(t.Context(), tx, customer, card, holder)
	}))
}

// approve makes card approved for c1: a call on it takes a slot and is
// approved.
func approve(t *testing.T, s *velocity.Slots, card string) {
	t.Helper()
	holder := "approval-of-" + card
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", card, holder))
	require.NoError(t, s.Release(t.Context(), "c1", card, holder, true))
}

// An approved card's calls take slots from a pool of their own, past the
// maximum; a card not approved is still held to it, counting the approved
// card's calls in flight; another customer's approval is not this one's.
func TestSlotsOfApprovedCardsComeFromTheirOwnPool(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s, _ := approvedSlots(t, pool, 2, 6)
	approve(t, s, "good")
	for i := range 6 {
		require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", fmt.Sprintf("g%d/1", i)))
	}
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "good", "g6/1"), "the approved pool is full and so is the other")
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "new", "n0/1"), "six in flight: a new card waits")
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c2", "good", "other/1"))
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c2", "good", "other/2"))
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c2", "good", "other/3"), "c2 never had the card approved")

	for i := range 6 {
		require.NoError(t, s.Release(t.Context(), "c1", "good", fmt.Sprintf("g%d/1", i), true))
	}
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "new", "n0/1"))
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "new", "n1/1"))
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "new", "n2/1"), "a new card still at most the maximum")
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "good", "g7/1"),
		"the maximum's slots are all in flight on a new card: the approved pool waits too (the bound: see Slots)")
	require.NoError(t, s.Release(t.Context(), "c1", "new", "n0/1", false))
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "g7/1"))

	t.Run("an approval lasts thirty days", func(t *testing.T) {
		pool := dbtest.Pool(t)
		s, clk := approvedSlots(t, pool, 1, 6)
		approve(t, s, "good")
		clk.Advance(velocity.ApprovalLasts - time.Hour)
		require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "a/1"))
		require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "b/1"))
		clk.Advance(2 * time.Hour)
		require.NoError(t, s.Release(t.Context(), "c1", "good", "a/1", false))
		require.NoError(t, s.Release(t.Context(), "c1", "good", "b/1", false))
		require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "c/1"))
		require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "good", "d/1"), "no longer approved: held to the maximum")
	})
}

// A card that declines after its approval is held again at once: the
// decline clears the approval in the statement that counts it, and the
// card's next calls find the maximum's slots (with its calls in flight
// counted against it).
func TestSlotsOfACardThatStartsDecliningAreHeldAgain(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s, _ := approvedSlots(t, pool, 5, 50)
	approve(t, s, "good")
	for i := range 3 {
		require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", fmt.Sprintf("a%d/1", i)))
	}
	decline(t, pool, s, "c1", "good", "a0/1")
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "b0/1"), "1 decline + 2 in flight + this one: under 5")
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "good", "b1/1"))
	require.Equal(t, velocity.InFlight, reserveCard(t, s, "c1", "good", "b2/1"), "the card is held to the maximum again")
	var approved string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT approved::text FROM velocity_counters WHERE customer_id = 'c1'`).Scan(&approved))
	require.Equal(t, "{}", approved)

	for _, h := range []string{"a1/1", "a2/1", "b0/1", "b1/1"} {
		require.NoError(t, s.Release(t.Context(), "c1", "good", h, false))
	}
	approve(t, s, "other")
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "other", "o/1"), "another approved card keeps its pool")
}

// The bound of an approved card whose calls all decline, under
// concurrency over two nodes: of twenty calls at once, max(M, min(20, A))
// are granted; once their declines are recorded the rest find the
// maximum reached, and nothing more is granted that day.
func TestSlotsBoundAnApprovedCardThatDeclines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ maximum, approved, granted int }{
		{maximum: 5, approved: 8, granted: 8},
		{maximum: 5, approved: 3, granted: 5},
	} {
		t.Run(fmt.Sprintf("M%dA%d", tc.maximum, tc.approved), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.Pool(t)
			clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
			lim := &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Declines: tc.maximum}}
			nodes := []*velocity.Slots{velocity.NewSlots(lim, velocity.Declines, pool), velocity.NewSlots(lim, velocity.Declines, pool)}
			for _, n := range nodes {
				n.ApprovedInFlight = tc.approved
			}
			s := nodes[0]
			approve(t, s, "good")
			granted := make(chan string, 20)
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					h := fmt.Sprintf("d%d/1", i)
					a, err := nodes[i%2].Reserve(context.Background(), "c1", "good", h, false)
					if err == nil && a.Verdict == velocity.Granted {
						granted <- h
					}
				})
			}
			wg.Wait()
			close(granted)
			var sent []string
			for h := range granted {
				sent = append(sent, h)
			}
			require.Len(t, sent, tc.granted)
			for _, h := range sent {
				decline(t, pool, s, "c1", "good", h)
			}
			for i := range 20 {
				require.Equal(t, velocity.Reached, reserveCard(t, s, "c1", "good", fmt.Sprintf("late%d/1", i)))
			}
			n, slots := slotsOf(t, pool, "c1", velocity.Declines)
			require.Equal(t, tc.granted, n, "every call made declined; none more was made")
			require.Empty(t, slots)
		})
	}
}

type waitArgs struct {
	N int `json:"n"`
}

func (waitArgs) Kind() string { return "velocity_test_wait" }

// waitingJob inserts a River job as a snoozed waiter would be: scheduled
// a while ahead.
func waitingJob(t *testing.T, pool *pgxpool.Pool, n int) int64 {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	res, err := client.Insert(t.Context(), waitArgs{N: n}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateScheduled, res.Job.State)
	return res.Job.ID
}

func jobState(t *testing.T, pool *pgxpool.Pool, id int64) (rivertype.JobState, bool) {
	t.Helper()
	var state rivertype.JobState
	var due bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state, scheduled_at <= now() FROM river_job WHERE id = $1`, id).Scan(&state, &due))
	return state, due
}

func waiters(t *testing.T, pool *pgxpool.Pool, customer string) []int64 {
	t.Helper()
	var w []int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT waiters FROM velocity_counters WHERE customer_id = $1`, customer).Scan(&w))
	return w
}

// wait makes job a waiter of holder's call, as the charge pipeline does
// when Reserve found the slots in flight.
func wait(t *testing.T, pool *pgxpool.Pool, s *velocity.Slots, card, holder string, job int64) velocity.Verdict {
	t.Helper()
	var a velocity.Answer
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		a, err = s.Wait(t.Context(), tx, "c1", card, holder, job)
		return err
	}))
	return a.Verdict
}

// A slot given back makes the oldest waiter's job available at once, in
// the release's transaction; the others keep waiting. A waiter that finds
// a slot when it asks again in Wait does not wait. Once the maximum is
// reached every waiter is woken (to hear it). A waiter whose job ended is
// dropped without taking a wake-up.
func TestFreedSlotWakesTheOldestWaiter(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s, _ := approvedSlots(t, pool, 2, 0)
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "x", "a/1"))
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "x", "b/1"))
	dead, first, second, third := waitingJob(t, pool, 0), waitingJob(t, pool, 1), waitingJob(t, pool, 2), waitingJob(t, pool, 3)
	for i, job := range []int64{dead, first, second, third} {
		require.Equal(t, velocity.InFlight, wait(t, pool, s, "x", fmt.Sprintf("w%d/1", i), job))
	}
	require.Equal(t, []int64{dead, first, second, third}, waiters(t, pool, "c1"))
	_, err := pool.Exec(t.Context(), `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, dead)
	require.NoError(t, err)

	listener, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(t.Context(), `LISTEN river_insert`)
	require.NoError(t, err)

	require.NoError(t, s.Release(t.Context(), "c1", "x", "a/1", true))
	notified, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(notified)
	require.NoError(t, err, "the nodes are told to fetch the woken job now")
	require.JSONEq(t, `{"queue": "default"}`, n.Payload)
	state, due := jobState(t, pool, first)
	require.Equal(t, rivertype.JobStateAvailable, state)
	require.True(t, due, "woken now, not at its own time")
	state, due = jobState(t, pool, second)
	require.Equal(t, rivertype.JobStateScheduled, state)
	require.False(t, due)
	require.Equal(t, []int64{second, third}, waiters(t, pool, "c1"), "the woken one and the ended one left")

	require.Equal(t, velocity.Granted, wait(t, pool, s, "x", "w1/1", first), "woken, it asks again and finds the slot")

	t.Run("a release in a transaction rolled back wakes nobody", func(t *testing.T) {
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		require.NoError(t, s.ReleaseTx(t.Context(), tx, "c1", "x", "b/1", false))
		require.NoError(t, tx.Rollback(t.Context()))
		state, _ := jobState(t, pool, second)
		require.Equal(t, rivertype.JobStateScheduled, state)
	})

	decline(t, pool, s, "c1", "x", "b/1")
	decline(t, pool, s, "c1", "x", "w1/1")
	for _, job := range []int64{second, third} {
		state, due := jobState(t, pool, job)
		require.Equal(t, rivertype.JobStateAvailable, state, "the maximum is reached: every waiter goes on to hear it")
		require.True(t, due)
	}
	require.Empty(t, waiters(t, pool, "c1"))
}

// A waiter whose job is running when a slot frees is kept (it asked
// again, or it joins the waiters in the transaction that snoozes it and
// is then woken by the next slot freed); and the approval of a card wakes
// as many waiters as its pool has room for.
func TestApprovalWakesWaitersForTheApprovedPool(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s, _ := approvedSlots(t, pool, 1, 3)
	require.Equal(t, velocity.Granted, reserveCard(t, s, "c1", "x", "a/1"))
	jobs := make([]int64, 5)
	for i := range jobs {
		jobs[i] = waitingJob(t, pool, i)
		require.Equal(t, velocity.InFlight, wait(t, pool, s, "x", fmt.Sprintf("w%d/1", i), jobs[i]))
	}
	_, err := pool.Exec(t.Context(), `UPDATE river_job SET state = 'running' WHERE id = $1`, jobs[0])
	require.NoError(t, err)

	require.NoError(t, s.Release(t.Context(), "c1", "x", "a/1", true))
	woken := 0
	for _, job := range jobs[1:] {
		if state, _ := jobState(t, pool, job); state == rivertype.JobStateAvailable {
			woken++
		}
	}
	require.Equal(t, 4, woken, "the maximum's slot and the approved pool's three")
	require.Equal(t, []int64{jobs[0]}, waiters(t, pool, "c1"), "the running one is kept")
}
