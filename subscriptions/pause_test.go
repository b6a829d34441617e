package subscriptions_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// charged creates a subscription in zone, anchored at anchor, whose first
// period the creation bills (as renewals does when it is due at once).
func (b testBundle) charged(t *testing.T, interval period.Interval, zone string, anchor time.Time) subscriptions.Subscription {
	t.Helper()
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(context.Background(), tx, subscriptions.New{
			CustomerID: "cust-1", Amount: 49900, Currency: "EUR", Interval: interval, IntervalCount: 1, TimeZone: zone,
			BillingAnchor: &anchor,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_1", ExpMonth: 12, ExpYear: 2030},
		}, actor, func(draft subscriptions.Subscription) (*subscriptions.Advance, subscriptions.SendWith, error) {
			return &subscriptions.Advance{ID: draft.ID, NextPeriodIndex: 1, NextChargeAt: draft.Schedule().Start(1)}, nil, nil
		})
		return err
	})
	require.Equal(t, 1, sub.NextPeriodIndex)
	return sub
}

func (b testBundle) pause(t *testing.T, sub subscriptions.Subscription, resumeAt *time.Time, on subscriptions.OnResume) (subscriptions.Subscription, bool) {
	t.Helper()
	var got subscriptions.Subscription
	var changed bool
	b.inTx(t, func(tx pgx.Tx) (err error) {
		got, changed, err = b.store.Pause(context.Background(), tx, sub.ID, resumeAt, on, actor)
		return err
	})
	return got, changed
}

func (b testBundle) resume(t *testing.T, sub subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	var got subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		got, _, err = b.store.Resume(context.Background(), tx, sub.ID, actor)
		return err
	})
	return got
}

// A pause 10 days into a month keeps what was left of it: resumed 45 days
// later, the schedule restarts at the resume plus exactly that time, as
// period 0 of a new grid whose key follows the charged one.
func TestContinuePeriodResumesAtResumePlusTheTimeLeft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.charged(t, period.Month, "Europe/Moscow", b.clock.Now())
	periodEnd := sub.NextChargeAt
	require.Equal(t, time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), periodEnd)

	b.clock.Advance(10 * 24 * time.Hour)
	paused, changed := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	require.True(t, changed)
	require.Equal(t, subscriptions.ContinuePeriod, paused.OnResume)
	require.NotNil(t, paused.PausedTimeLeft)
	require.Equal(t, 21*24*time.Hour, *paused.PausedTimeLeft, "Dec 11 09:00 to Jan 1 09:00")
	require.Equal(t, periodEnd, paused.NextChargeAt, "the grid is kept while paused")

	b.clock.Advance(45*24*time.Hour + 17*time.Second + 123*time.Microsecond)
	resumeAt := b.clock.Now()
	resumed := b.resume(t, paused)
	require.Equal(t, subscriptions.Active, resumed.Status)
	require.Equal(t, resumeAt.Add(21*24*time.Hour), resumed.BillingAnchor, "to the microsecond")
	require.Equal(t, resumed.BillingAnchor, resumed.NextChargeAt)
	require.Zero(t, resumed.NextPeriodIndex)
	require.Nil(t, resumed.PausedTimeLeft)
	require.Nil(t, resumed.PausedAt)
	require.Equal(t, subscriptions.ContinuePeriod, resumed.OnResume, "what the last pause's resume did")
	require.Equal(t, "2027-02-15", resumed.Schedule().Period(0).Key, "Jan 25 + 21 days, Moscow")
	require.Equal(t, []string{"created", "paused", "resumed"}, b.events(t, sub))
}

// The time kept is elapsed time: a pause before the spring DST change in
// Berlin, resumed after the autumn one, charges the kept seconds after the
// resume, and the new grid keeps the new anchor's local time of day.
func TestContinuePeriodAcrossDSTInBerlin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	b.clock.Set(time.Date(2027, 3, 1, 0, 30, 0, 0, berlin))
	sub := b.charged(t, period.Month, "Europe/Berlin", b.clock.Now())
	require.Equal(t, time.Date(2027, 4, 1, 0, 30, 0, 0, berlin).UTC(), sub.NextChargeAt, "CEST by then")

	b.clock.Set(time.Date(2027, 3, 20, 12, 0, 0, 0, berlin)) // CET, UTC+1
	paused, _ := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	// Mar 20 11:00Z to Mar 31 22:30Z: one hour less than the wall clock's
	// 11 days 12 h 30 min, lost to the spring change.
	require.Equal(t, 11*24*time.Hour+11*time.Hour+30*time.Minute, *paused.PausedTimeLeft)

	b.clock.Set(time.Date(2027, 10, 20, 12, 0, 0, 0, berlin)) // CEST, UTC+2
	resumed := b.resume(t, paused)
	anchor := time.Date(2027, 10, 31, 21, 30, 0, 0, time.UTC) // Oct 20 10:00Z + the time kept
	require.Equal(t, anchor, resumed.BillingAnchor)
	require.Equal(t, anchor, resumed.NextChargeAt)
	require.Equal(t, "22:30 CET", resumed.BillingAnchor.In(berlin).Format("15:04 MST"), "after the autumn change")
	sched := resumed.Schedule()
	require.Equal(t, "2027-10-31", sched.Period(0).Key)
	require.Equal(t, time.Date(2027, 11, 30, 22, 30, 0, 0, berlin).UTC(), sched.Start(1), "then monthly on the new anchor's wall clock")
}

// The resumed grid's first key is later than every charged key, so the
// unique period key can never take the new period for a charged one: for
// each interval, pauses with a minute left, an hour in and mid-period,
// resumed at the very instant of the pause, a minute later and a day later.
func TestContinuePeriodNeverReusesAChargedKey(t *testing.T) {
	t.Parallel()
	for _, interval := range []period.Interval{period.Day, period.Week, period.Month, period.Year} {
		for _, zone := range []string{"UTC", "Europe/Berlin", "Pacific/Kiritimati"} {
			t.Run(fmt.Sprintf("%s/%s", interval, zone), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				anchor := time.Date(2027, 3, 27, 23, 59, 0, 0, time.UTC)
				for _, into := range []string{"minute left", "hour in", "mid"} {
					for _, after := range []time.Duration{0, time.Minute, 24 * time.Hour} {
						b.clock.Set(anchor)
						sub := b.charged(t, interval, zone, anchor)
						charged := sub.Schedule().Period(0)
						switch into {
						case "minute left":
							b.clock.Set(charged.End.Add(-time.Minute))
						case "hour in":
							b.clock.Set(charged.Start.Add(time.Hour))
						default:
							b.clock.Set(charged.Start.Add(charged.End.Sub(charged.Start) / 2))
						}
						paused, _ := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
						require.Equal(t, charged.End.Sub(b.clock.Now()), *paused.PausedTimeLeft)
						b.clock.Advance(after)
						resumed := b.resume(t, paused)
						first := resumed.Schedule().Period(0)
						require.Equal(t, b.clock.Now().Add(*paused.PausedTimeLeft), first.Start, "%s, resumed %s later", into, after)
						require.False(t, first.Start.Before(charged.End), "%s, resumed %s later", into, after)
						require.Greater(t, first.Key, charged.Key, "%s, resumed %s later", into, after)
						if after == 0 {
							require.Equal(t, charged.End, first.Start, "resumed at the pause's instant: the charged period's end")
						}
					}
				}
			})
		}
	}
}

// A pause a minute before the period ends keeps that minute.
func TestContinuePeriodWithAMinuteLeft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.charged(t, period.Month, "Europe/Moscow", b.clock.Now())
	b.clock.Set(sub.NextChargeAt.Add(-time.Minute))
	paused, _ := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	require.Equal(t, time.Minute, *paused.PausedTimeLeft)
	b.clock.Advance(3 * time.Hour)
	resumed := b.resume(t, paused)
	require.Equal(t, b.clock.Now().Add(time.Minute), resumed.NextChargeAt)
}

// Before the first billing anchor nothing was charged: the time kept is the
// time until the anchor, so the first period begins that long after the
// resume and nothing is charged before it.
func TestContinuePeriodBeforeTheFirstAnchor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	anchor := b.clock.Now().Add(14 * 24 * time.Hour)
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(context.Background(), tx, subscriptions.New{
			CustomerID: "cust-1", Amount: 49900, Currency: "RUB", Interval: period.Month, IntervalCount: 1, TimeZone: "UTC",
			BillingAnchor: &anchor,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_1", ExpMonth: 12, ExpYear: 2030},
		}, actor, nil)
		return err
	})
	b.clock.Advance(4 * 24 * time.Hour)
	paused, _ := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	require.Equal(t, 10*24*time.Hour, *paused.PausedTimeLeft)
	b.clock.Advance(60 * 24 * time.Hour)
	resumed := b.resume(t, paused)
	require.Equal(t, b.clock.Now().Add(10*24*time.Hour), resumed.BillingAnchor)
	require.Equal(t, resumed.BillingAnchor, resumed.NextChargeAt)
}

// Repeating a pause changes nothing; a different on_resume changes the
// pause's (the time kept is always the time left when the pause began,
// however late the change), and an omitted one leaves it as it is.
func TestRepeatedPauseWithOnResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.charged(t, period.Month, "UTC", b.clock.Now())
	b.clock.Advance(10 * 24 * time.Hour)
	resumeAt := b.clock.Now().Add(90 * 24 * time.Hour)
	first, changed := b.pause(t, sub, &resumeAt, subscriptions.ContinuePeriod)
	require.True(t, changed)
	for _, on := range []subscriptions.OnResume{subscriptions.ContinuePeriod, "", subscriptions.ContinuePeriod} {
		b.clock.Advance(time.Hour)
		again, changed := b.pause(t, sub, nil, on)
		require.False(t, changed, "on_resume %q", on)
		require.Equal(t, first, again)
	}
	require.Equal(t, []string{"created", "paused"}, b.events(t, sub))

	b.clock.Advance(5 * 24 * time.Hour)
	switched, changed := b.pause(t, sub, nil, subscriptions.StartNewPeriod)
	require.True(t, changed)
	require.Equal(t, subscriptions.StartNewPeriod, switched.OnResume)
	require.Nil(t, switched.PausedTimeLeft)
	require.Equal(t, first.PausedAt, switched.PausedAt)
	require.True(t, resumeAt.Equal(*switched.ResumeAt), "a repeat's resume_at is not taken")

	b.clock.Advance(30 * 24 * time.Hour) // past the interrupted period's end
	back, changed := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	require.True(t, changed)
	require.Equal(t, *first.PausedTimeLeft, *back.PausedTimeLeft, "the time left when the pause began")
	require.Equal(t, []string{"created", "paused", "paused", "paused"}, b.events(t, sub))

	resumed := b.resume(t, back)
	require.Equal(t, b.clock.Now().Add(*first.PausedTimeLeft), resumed.NextChargeAt)
}

func TestPauseRefusesAnUnknownOnResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	for _, status := range []string{"active", "paused"} {
		if status == "paused" {
			b.pause(t, sub, nil, "")
		}
		err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			_, _, err := b.store.Pause(context.Background(), tx, sub.ID, nil, "continue_existing_billing_period", actor)
			return err
		})
		var errs rebilltype.Errors
		require.True(t, errors.As(err, &errs), "%s: %v", status, err)
		require.Equal(t, "on_resume", errs[0].Field)
	}
	got, err := b.store.Get(context.Background(), b.pool, sub.ID)
	require.NoError(t, err)
	require.Equal(t, subscriptions.StartNewPeriod, got.OnResume, "the default")
	require.Nil(t, got.PausedTimeLeft)
}

// A scheduled cancel survives a pause that continues its period and falls
// at the end of the kept time, after the resume: the interrupted period's
// end passing while paused neither cancels it nor refuses the resume, a
// cancel at period end can still be scheduled then, and the cancel's
// instant is the resumed grid's next period start.
func TestContinuePeriodMovesTheScheduledCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.charged(t, period.Month, "UTC", b.clock.Now())
	b.clock.Advance(10 * 24 * time.Hour)
	paused, _ := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	b.clock.Advance(45 * 24 * time.Hour)
	b.inTx(t, func(tx pgx.Tx) error {
		got, changed, err := b.store.Cancel(ctx, tx, sub.ID, true, actor)
		require.True(t, changed)
		require.Equal(t, subscriptions.Paused, got.Status, "scheduled, not cancelled now")
		require.True(t, got.CancelAtPeriodEnd)
		return err
	})
	// A switch to start_new_period now would put the cancel 35 days back.
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.store.Pause(ctx, tx, sub.ID, nil, subscriptions.StartNewPeriod, actor)
		return err
	})
	var te *fsm.TransitionError
	require.True(t, errors.As(err, &te), "%v", err)

	var locked []subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		locked, err = b.store.LockScheduledCancels(ctx, tx, b.clock.Now(), 10)
		return err
	})
	require.Empty(t, locked, "the sweep leaves a pause that continues its period alone")

	resumed := b.resume(t, paused)
	require.Equal(t, subscriptions.Active, resumed.Status)
	require.True(t, resumed.CancelAtPeriodEnd)
	require.Equal(t, b.clock.Now().Add(*paused.PausedTimeLeft), resumed.NextChargeAt, "where the cancel falls")
}

// An immediate cancel of a pause that continues its period drops the time
// kept with the pause.
func TestCancelDropsTheTimeKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.charged(t, period.Month, "UTC", b.clock.Now())
	b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	var got subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		got, _, err = b.store.Cancel(context.Background(), tx, sub.ID, false, actor)
		return err
	})
	require.Equal(t, subscriptions.Cancelled, got.Status)
	require.Nil(t, got.PausedTimeLeft)
	require.Nil(t, got.PausedAt)
}

// A change of interval while paused restarts the grid and moves the next
// charge; a later switch of the pause to continue_period still keeps the
// time that was left in the period the pause interrupted, not the time
// from the pause to the restarted grid's anchor (days nobody paid for).
func TestContinuePeriodChosenAfterAnIntervalChangeWhilePaused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.charged(t, period.Week, "UTC", b.clock.Now())
	b.clock.Advance(3 * 24 * time.Hour)
	paused, changed := b.pause(t, sub, nil, subscriptions.StartNewPeriod)
	require.True(t, changed)
	left := sub.NextChargeAt.Sub(*paused.PausedAt)
	require.Equal(t, 4*24*time.Hour, left)

	b.clock.Advance(10 * 24 * time.Hour) // past the interrupted period's end
	month := period.Month
	updated, _, err := b.update(t, sub.ID, subscriptions.Update{Interval: &month}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, subscriptions.Paused, updated.Status)
	require.NotEqual(t, sub.NextChargeAt, updated.NextChargeAt, "the change restarted the grid")

	b.clock.Advance(24 * time.Hour)
	switched, changed := b.pause(t, sub, nil, subscriptions.ContinuePeriod)
	require.True(t, changed)
	require.Equal(t, left, *switched.PausedTimeLeft, "the time left when the pause began")

	b.clock.Advance(30 * 24 * time.Hour)
	resumed := b.resume(t, switched)
	require.Equal(t, b.clock.Now().Add(left), resumed.NextChargeAt)
}
