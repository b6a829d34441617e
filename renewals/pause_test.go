package renewals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

func (b testBundle) get(t *testing.T, sub subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	got, err := b.subs.Get(context.Background(), b.pool, sub.ID)
	require.NoError(t, err)
	return got
}

// A pause that continues its period, spanning more than a period, with a
// resume_at the scan reaches two days late: the scan resumes it as of
// resume_at, charges nothing then, and the next period is charged once,
// exactly the time kept after resume_at.
func TestScheduledResumeContinuesThePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	require.Equal(t, 1, b.scan(t).Enqueued)
	b.clock.Advance(10 * 24 * time.Hour)
	resumeAt := b.clock.Now().Add(40 * 24 * time.Hour) // Jan 20 09:00, past the period's end
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, &resumeAt, subscriptions.ContinuePeriod, subscriptions.System)
		return err
	})
	b.clock.Advance(35 * 24 * time.Hour) // Jan 15: the period ended while paused
	res := b.scan(t)
	require.Zero(t, res.Resumed+res.Enqueued+res.Cancelled)

	b.clock.Advance(7 * 24 * time.Hour) // Jan 22: the scan comes two days late
	res = b.scan(t)
	require.Equal(t, 1, res.Resumed)
	require.Zero(t, res.Enqueued, "the kept time was paid")
	next := resumeAt.Add(21 * 24 * time.Hour) // Feb 10 09:00
	got := b.get(t, sub)
	require.Equal(t, subscriptions.Active, got.Status)
	require.Equal(t, next, got.NextChargeAt, "as of resume_at, not of the late scan")

	b.clock.Set(next.Add(-time.Second))
	require.Zero(t, b.scan(t).Enqueued)
	b.clock.Set(next)
	require.Equal(t, 1, b.scan(t).Enqueued)
	require.Zero(t, b.scan(t).Enqueued)
	require.Equal(t, []string{"2026-12-01", "2027-02-10"}, b.periodKeys(t, sub))
	require.Equal(t, time.Date(2027, 3, 10, 9, 0, 0, 0, time.UTC), b.get(t, sub).NextChargeAt, "then monthly from there")
}

// A cancel scheduled at period end with a pause that continues its period:
// the sweep of cancels due while paused does not fire at the interrupted
// period's end; the cancel takes effect at the end of the kept time after
// the resume, as of that instant, and no period is charged meanwhile.
func TestScheduledCancelWaitsForTheKeptTime(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"resume", "resume_at"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			sub := b.create(t, period.Month, nil)
			b.scan(t)
			b.clock.Advance(10 * 24 * time.Hour)
			var resumeAt *time.Time
			if how == "resume_at" {
				at := b.clock.Now().Add(45 * 24 * time.Hour)
				resumeAt = &at
			}
			b.inTx(t, func(tx pgx.Tx) error {
				if _, _, err := b.subs.Cancel(ctx, tx, sub.ID, true, subscriptions.System); err != nil {
					return err
				}
				_, _, err := b.subs.Pause(ctx, tx, sub.ID, resumeAt, subscriptions.ContinuePeriod, subscriptions.System)
				return err
			})
			b.clock.Advance(30 * 24 * time.Hour) // past the interrupted period's end (Jan 1)
			require.Zero(t, b.scan(t).Cancelled)
			require.Equal(t, subscriptions.Paused, b.get(t, sub).Status)

			b.clock.Advance(15 * 24 * time.Hour) // Jan 25 09:00
			resumed := b.clock.Now()
			if how == "resume" {
				b.inTx(t, func(tx pgx.Tx) error {
					_, _, err := b.subs.Resume(ctx, tx, sub.ID, subscriptions.System)
					return err
				})
			} else {
				require.Equal(t, 1, b.scan(t).Resumed)
			}
			end := resumed.Add(21 * 24 * time.Hour) // Feb 15 09:00
			got := b.get(t, sub)
			require.Equal(t, subscriptions.Active, got.Status)
			require.True(t, got.CancelAtPeriodEnd)
			require.Equal(t, end, got.NextChargeAt)

			b.clock.Set(end.Add(-time.Minute))
			res := b.scan(t)
			require.Zero(t, res.Cancelled+res.Enqueued)
			require.Equal(t, subscriptions.Active, b.get(t, sub).Status)

			b.clock.Set(end.Add(3 * time.Hour))
			require.Zero(t, b.scan(t).Enqueued)
			got = b.get(t, sub)
			require.Equal(t, subscriptions.Cancelled, got.Status)
			require.Equal(t, end, got.CancelledAt.UTC(), "as of the kept time's end")
			require.Equal(t, []string{"2026-12-01"}, b.periodKeys(t, sub))
		})
	}
}

// A person's resume racing the scan's resume at resume_at: one of them
// resumes (one resumed event), as of its own instant, and the other finds
// it active and changes nothing; nothing is charged at the resume, and the
// next charge is the time kept after whichever resumed.
func TestResumeRacesTheScheduledResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 4 {
		sub := b.create(t, period.Week, nil)
		b.scan(t)
		b.clock.Advance(2 * 24 * time.Hour)
		resumeAt := b.clock.Now().Add(24 * time.Hour)
		b.inTx(t, func(tx pgx.Tx) error {
			_, _, err := b.subs.Pause(ctx, tx, sub.ID, &resumeAt, subscriptions.ContinuePeriod, subscriptions.System)
			return err
		})
		b.clock.Advance(30 * time.Hour)
		now := b.clock.Now()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := b.renewals.Scan(ctx, now)
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				_, _, err := b.subs.Resume(ctx, tx, sub.ID, subscriptions.System)
				return err
			}))
		}()
		wg.Wait()
		got := b.get(t, sub)
		require.Equal(t, subscriptions.Active, got.Status)
		kept := 5 * 24 * time.Hour
		require.Contains(t, []time.Time{resumeAt.Add(kept), now.Add(kept)}, got.NextChargeAt, "round %d", i)
		events, err := b.subs.Events(ctx, b.pool, sub.ID, 0, 100)
		require.NoError(t, err)
		resumed := 0
		for _, e := range events {
			if e.Type == subscriptions.EventResumed {
				resumed++
			}
		}
		require.Equal(t, 1, resumed, "round %d", i)
		b.scan(t)
		require.Len(t, b.periodKeys(t, sub), 1, "round %d: nothing charged at the resume", i)
	}
}
