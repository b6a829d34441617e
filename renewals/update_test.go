package renewals_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

func ptr[T any](v T) *T { return &v }

func (b testBundle) update(t *testing.T, sub subscriptions.Subscription, u subscriptions.Update, pr subscriptions.Proration) (subscriptions.Subscription, subscriptions.Change, error) {
	t.Helper()
	var (
		got subscriptions.Subscription
		ch  subscriptions.Change
	)
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		got, ch, err = b.renewals.Update(context.Background(), tx, sub.ID, u, pr, subscriptions.Actor{ID: "key-1", Role: "support"})
		return err
	})
	return got, ch, err
}

// charges returns the subscription's charges by period key.
func (b testBundle) charges(t *testing.T, sub subscriptions.Subscription) map[string]charges.Charge {
	t.Helper()
	cs, err := charges.ListBySubscription(context.Background(), b.pool, sub.ID, [16]byte{}, 100)
	require.NoError(t, err)
	out := map[string]charges.Charge{}
	for _, c := range cs {
		out[c.PeriodKey] = c
	}
	return out
}

// settle sets a charge's status as the pipeline would leave it (the
// pipeline is not what these tests are about).
func (b testBundle) settle(t *testing.T, sub subscriptions.Subscription, periodKey string, status charges.Status) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `UPDATE charges SET status = $3 WHERE subscription_id = $1 AND period_key = $2`,
		sub.ID, periodKey, string(status))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "charge of %s", periodKey)
}

// whileLocked runs each of fns in its own goroutine while a transaction
// holds the subscription's row, waits until waiting of them wait for a
// lock, releases the row and waits for them all: the fns then race from
// the same stale start, unless they lock the row before reading it.
func (b testBundle) whileLocked(t *testing.T, sub subscriptions.Subscription, waiting int, fns ...func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = b.subs.GetForUpdate(ctx, tx, sub.ID)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n >= waiting
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	wg.Wait()
}

// paidMonth is a monthly subscription of 1500 whose December period
// (Dec 1 09:00 .. Jan 1 09:00 UTC, 31 days) was captured, 10 days in.
func (b testBundle) paidMonth(t *testing.T) subscriptions.Subscription {
	t.Helper()
	sub := b.create(t, period.Month, nil)
	require.Equal(t, 1, b.scan(t).Enqueued)
	b.settle(t, sub, "2026-12-01", charges.Succeeded)
	b.clock.Advance(10 * 24 * time.Hour)
	return sub
}

// An upgrade with charge_now charges the difference over the 21 days
// left of 31 as an adjustment charge of its own key, once; the next
// period is at the new price.
func TestUpgradeNowChargesTheProratedDifference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.paidMonth(t)
	got, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, int64(3000), got.Amount)
	require.Equal(t, int64(1016), ch.Adjustment, "1500 * 21/31 = 1016.13")
	adj := b.charges(t, sub)[charges.AdjustmentKey("2026-12-01", ch.ID)]
	require.Equal(t, int64(1016), adj.Amount)
	require.Equal(t, charges.Scheduled, adj.Status)
	require.Equal(t, sub.ID.String()+":2026-12-01:adj:"+ch.ID.String(), adj.Key())
	key, attempt, op, ok := charges.ParseGatewayKey(adj.Key() + ":a1:authorize")
	require.True(t, ok)
	require.Equal(t, adj.Key(), key)
	require.Equal(t, 1, attempt)
	require.EqualValues(t, "authorize", op)
	refundOf, n, ok := charges.ParseRefundKey(adj.Key() + ":r1:refund")
	require.True(t, ok)
	require.Equal(t, adj.Key(), refundOf)
	require.Equal(t, 1, n)
	found, err := charges.ByKeys(context.Background(), b.pool, []string{adj.Key()})
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, adj.ID, found[0].ID)

	b.clock.Advance(22 * 24 * time.Hour)
	b.scan(t)
	require.Equal(t, int64(3000), b.charges(t, sub)["2027-01-01"].Amount)
	require.Len(t, b.charges(t, sub), 3)
}

// A downgrade credits its unused difference; the credit reduces the next
// charges, a period it covers whole has no charge, and what is left
// carries over.
func TestDowngradeCreditsTheNextCharges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.paidMonth(t)
	got, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(500))}, subscriptions.ProrationCreditNext)
	require.NoError(t, err)
	require.Equal(t, int64(-677), ch.Adjustment, "-1000 * 21/31 = -677.4")
	require.Equal(t, int64(677), got.CreditBalance)
	require.Len(t, b.charges(t, sub), 1, "a credit charges nothing")

	b.clock.Advance(22 * 24 * time.Hour) // January
	b.scan(t)
	require.NotContains(t, b.charges(t, sub), "2027-01-01", "January is covered by the credit: no charge")
	got = b.get(t, sub)
	require.Equal(t, int64(177), got.CreditBalance)
	require.Equal(t, 2, got.NextPeriodIndex, "January was passed all the same")

	b.clock.Advance(31 * 24 * time.Hour) // February
	b.scan(t)
	require.Equal(t, int64(323), b.charges(t, sub)["2027-02-01"].Amount, "500 less the 177 left")
	require.Zero(t, b.get(t, sub).CreditBalance)
	var used []int64
	rows, err := b.pool.Query(context.Background(), `SELECT amount FROM subscription_credits WHERE subscription_id = $1 ORDER BY id`, sub.ID)
	require.NoError(t, err)
	used, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{677, -500, -177}, used)
}

// No credit for money never paid: the period's charge declined, so a
// downgrade gives nothing back; a partly refunded one gives back the
// unused share of what was kept.
func TestCreditIsCappedByWhatWasCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	b.settle(t, sub, "2026-12-01", charges.Failed)
	b.clock.Advance(10 * 24 * time.Hour)
	got, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(500))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Zero(t, ch.Adjustment)
	require.Zero(t, got.CreditBalance)

	other := b.create(t, period.Month, nil)
	b.scan(t)
	b.settle(t, other, "2026-12-11", charges.Succeeded) // created 10 days later: its own anchor
	_, err = b.pool.Exec(context.Background(), `UPDATE charges SET refund_reserved = 1200, amount_refunded = 1200 WHERE subscription_id = $1`, other.ID)
	require.NoError(t, err)
	b.clock.Advance(time.Hour * 24 * 31 / 2)
	_, ch, err = b.update(t, other, subscriptions.Update{Amount: ptr(int64(100))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, int64(-150), ch.Adjustment, "kept 300, half of the period left: 150, not 700")
	_, ch, err = b.update(t, other, subscriptions.Update{Amount: ptr(int64(50))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, int64(-25), ch.Adjustment, "-50/2, under the cap (300 kept - 150 granted)/2 = 75")
	_, ch, err = b.update(t, other, subscriptions.Update{Amount: ptr(int64(1))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, int64(-24), ch.Adjustment, "-49/2 = -24.5, a tie: to the even -24")
}

// A prorated change while the period's charge is in flight is refused
// and the charge keeps its amount; without proration it goes through.
func TestProratedChangeWaitsForTheChargeInFlight(t *testing.T) {
	t.Parallel()
	for _, status := range []charges.Status{charges.Scheduled, charges.Authorizing, charges.Capturing, charges.Unknown, charges.RequiresReview} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			sub := b.create(t, period.Month, nil)
			b.scan(t)
			if status != charges.Scheduled {
				b.settle(t, sub, "2026-12-01", status)
			}
			b.clock.Advance(24 * time.Hour)
			_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationChargeNow)
			require.ErrorIs(t, err, subscriptions.ErrChargeInFlight)
			require.Equal(t, int64(1500), b.get(t, sub).Amount)
			require.Equal(t, int64(1500), b.charges(t, sub)["2026-12-01"].Amount)
			require.Len(t, b.charges(t, sub), 1)

			got, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationNone)
			require.NoError(t, err)
			require.Zero(t, ch.Adjustment)
			require.Equal(t, int64(3000), got.Amount)
			require.Equal(t, int64(1500), b.charges(t, sub)["2026-12-01"].Amount, "the charge in flight keeps its amount")
		})
	}
}

// A change at period end waits as the pending update and applies exactly
// at the boundary: the next period's charge is at the new price. A
// second one replaces the first; a removed one never applies.
func TestPendingUpdateAppliesAtTheBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.paidMonth(t)
	got, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(2000)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, int64(1500), got.Amount)
	require.NotNil(t, got.PendingUpdate)
	require.Equal(t, time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), got.PendingUpdate.EffectiveAt)
	got, _, err = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(2500)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, int64(2500), *got.PendingUpdate.Amount, "the second replaces the first")

	b.clock.Set(time.Date(2027, 1, 1, 8, 59, 59, 0, time.UTC))
	b.scan(t)
	require.Len(t, b.charges(t, sub), 1, "not before the boundary")
	b.clock.Set(time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC))
	b.scan(t)
	require.Equal(t, int64(2500), b.charges(t, sub)["2027-01-01"].Amount)
	got = b.get(t, sub)
	require.Nil(t, got.PendingUpdate)
	require.Equal(t, int64(2500), got.Amount)

	var applied, removed int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(applied_at), count(removed_at) FROM subscription_changes
		WHERE subscription_id = $1`, sub.ID).Scan(&applied, &removed))
	require.Equal(t, 1, applied)
	require.Equal(t, 1, removed)

	// Removed: the next boundary keeps the price.
	_, _, err = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(9000)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	b.inTx(t, func(tx pgx.Tx) error {
		_, changed, err := b.subs.RemovePendingUpdate(context.Background(), tx, sub.ID, subscriptions.System)
		require.True(t, changed)
		return err
	})
	b.inTx(t, func(tx pgx.Tx) error {
		_, changed, err := b.subs.RemovePendingUpdate(context.Background(), tx, sub.ID, subscriptions.System)
		require.False(t, changed, "removing twice changes nothing")
		return err
	})
	b.clock.Set(time.Date(2027, 2, 1, 9, 0, 0, 0, time.UTC))
	b.scan(t)
	require.Equal(t, int64(2500), b.charges(t, sub)["2027-02-01"].Amount)
}

// The scan runs late (the clock jumped several periods past a pending
// interval change): the periods before the boundary are at the old
// terms, the schedule restarts at the boundary, and every later period
// is charged at the new terms once.
func TestPendingIntervalChangeWhenTheScanRunsLate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Week, nil)
	b.scan(t)
	_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(5000)), Interval: ptr(period.Month),
		Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	b.clock.Set(time.Date(2027, 2, 20, 9, 0, 0, 0, time.UTC))
	b.scan(t)
	b.scan(t)
	require.Equal(t, []string{"2026-12-01", "2026-12-08", "2027-01-08", "2027-02-08"}, b.periodKeys(t, sub))
	cs := b.charges(t, sub)
	require.Equal(t, int64(1500), cs["2026-12-01"].Amount)
	for _, k := range []string{"2026-12-08", "2027-01-08", "2027-02-08"} {
		require.Equal(t, int64(5000), cs[k].Amount, k)
	}
	got := b.get(t, sub)
	require.Equal(t, period.Month, got.Interval)
	require.Equal(t, time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC), got.BillingAnchor)
	require.Equal(t, time.Date(2027, 3, 8, 9, 0, 0, 0, time.UTC), got.NextChargeAt)
}

// A pending change scheduled while paused applies at the first period
// that begins at or after its time: here the resume's.
func TestPendingUpdateAppliesAtTheResumeAfterItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, nil, "", subscriptions.System)
		return err
	})
	_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(700)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	_, _, err = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(900))}, subscriptions.ProrationChargeNow)
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te, "a paused subscription is not prorated")
	b.clock.Set(time.Date(2027, 1, 15, 0, 0, 0, 0, time.UTC))
	b.inTx(t, func(tx pgx.Tx) error {
		sub, _, err := b.subs.Resume(context.Background(), tx, sub.ID, subscriptions.System)
		if err != nil {
			return err
		}
		_, err = b.renewals.Due(context.Background(), tx, sub)
		return err
	})
	require.Equal(t, int64(700), b.charges(t, sub)["2027-01-15"].Amount)
}

// An interval change now starts a new period at once, whose key differs
// from the paid one's although it starts the same day; the old period's
// unused time is credited and used by the new period's charge.
func TestIntervalChangeNowStartsANewPeriodTheSameDay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	b.settle(t, sub, "2026-12-01", charges.Succeeded)
	b.clock.Advance(time.Hour)
	got, ch, err := b.update(t, sub, subscriptions.Update{Interval: ptr(period.Week)}, subscriptions.ProrationCreditNext)
	require.NoError(t, err)
	require.True(t, ch.Restarted)
	require.Equal(t, int64(-1498), ch.Adjustment, "1500 * (31 d - 1 h) / 31 d = 1497.98")
	cs := b.charges(t, sub)
	require.Len(t, cs, 2)
	newKey := "2026-12-01" + got.PeriodKeySuffix
	require.NotEqual(t, "2026-12-01", newKey)
	require.Equal(t, int64(2), cs[newKey].Amount, "a week at 1500 less the credit of 1498")
	require.Zero(t, got.CreditBalance)
	require.Equal(t, b.clock.Now().Add(7*24*time.Hour), got.NextChargeAt)

	b.clock.Advance(7 * 24 * time.Hour)
	b.scan(t)
	require.Equal(t, int64(1500), b.charges(t, sub)["2026-12-08"+got.PeriodKeySuffix].Amount)
}

// The adjustment charge is the period's: a cancel voids it with the
// period's unstarted charges.
func TestCancelVoidsTheAdjustment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.paidMonth(t)
	_, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	b.inTx(t, func(tx pgx.Tx) error {
		if _, _, err := b.subs.CancelAt(context.Background(), tx, sub.ID, b.clock.Now(), subscriptions.System); err != nil {
			return err
		}
		return b.renewals.Cancelled(context.Background(), tx, sub.ID)
	})
	require.Equal(t, charges.Voided, b.charges(t, sub)[charges.AdjustmentKey("2026-12-01", ch.ID)].Status)
	_, _, err = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(100))}, subscriptions.ProrationNone)
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
}

// Two updates at once: the row lock serialises them, so the second is
// computed from the first's result (its price before is the first's
// price after), never a mixture; with charge_now the second finds the
// first's adjustment in flight and is refused, so one adjustment exists.
func TestConcurrentUpdatesSerialise(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 5 {
		sub := b.create(t, period.Month, nil)
		b.scan(t)
		b.settle(t, sub, sub.CurrentPeriod().Key, charges.Succeeded)
		amounts := []int64{2000, 4000}
		errs := make([]error, 2)
		pr := subscriptions.ProrationNone
		if round%2 == 1 {
			pr = subscriptions.ProrationChargeNow
		}
		fns := make([]func(), len(amounts))
		for i := range amounts {
			fns[i] = func() { _, _, errs[i] = b.update(t, sub, subscriptions.Update{Amount: ptr(amounts[i])}, pr) }
		}
		b.whileLocked(t, sub, 2, fns...)
		rows, err := b.pool.Query(context.Background(), `SELECT amount_before, amount_after, adjustment FROM subscription_changes
			WHERE subscription_id = $1 ORDER BY created_at, id`, sub.ID)
		require.NoError(t, err)
		type change struct{ Before, After, Adjustment int64 }
		log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[change])
		require.NoError(t, err)
		if round%2 == 0 {
			require.NoError(t, errors.Join(errs...))
			require.Len(t, log, 2)
			require.Equal(t, int64(1500), log[0].Before)
			require.Equal(t, log[0].After, log[1].Before, "the second saw the first's result")
			require.Equal(t, log[1].After, b.get(t, sub).Amount)
			continue
		}
		var refused int
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, subscriptions.ErrChargeInFlight)
				refused++
			}
		}
		require.Equal(t, 1, refused, "the second finds the first's adjustment in flight")
		require.Len(t, log, 1)
		require.Equal(t, log[0].After, b.get(t, sub).Amount)
		require.Len(t, b.charges(t, sub), 2, "the period's charge and one adjustment")
	}
}

// An immediate update races the scan that applies a pending update at
// the boundary: whichever runs first, the boundary's period is charged
// once, at the pending price in force at its start.
func TestUpdateRacesTheScanApplyingAPendingUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 4 {
		sub := b.create(t, period.Day, nil)
		b.scan(t)
		_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(2000)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
		require.NoError(t, err)
		b.clock.Advance(24 * time.Hour)
		boundary := b.get(t, sub).PendingUpdate.EffectiveAt
		// The update waits for the row; the scan skips it (another holds
		// it) and finds it again on its next run.
		b.whileLocked(t, sub, 1, func() {
			_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationNone)
			require.NoError(t, err)
		}, func() {
			_, err := b.renewals.Scan(context.Background(), b.clock.Now())
			require.NoError(t, err)
		})
		b.scan(t)
		key := boundary.Format("2006-01-02")
		cs := b.charges(t, sub)
		require.Len(t, cs, 2)
		require.Equal(t, int64(2000), cs[key].Amount, "the price in force at the boundary")
		require.Equal(t, int64(3000), b.get(t, sub).Amount)
	}
}

// An upgrade races a cancel: whichever takes the row first, no
// adjustment is left to take money (created before the cancel, it is
// voided with the period's charges; after it, the update is refused).
func TestUpdateRacesACancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 4 {
		sub := b.create(t, period.Month, nil)
		b.scan(t)
		b.settle(t, sub, sub.CurrentPeriod().Key, charges.Succeeded)
		b.clock.Advance(time.Hour)
		var updateErr error
		b.whileLocked(t, sub, 2, func() {
			_, _, updateErr = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationChargeNow)
		}, func() {
			b.inTx(t, func(tx pgx.Tx) error {
				if _, _, err := b.subs.CancelAt(context.Background(), tx, sub.ID, b.clock.Now(), subscriptions.System); err != nil {
					return err
				}
				return b.renewals.Cancelled(context.Background(), tx, sub.ID)
			})
		})
		cs := b.charges(t, sub)
		if updateErr != nil {
			var te *fsm.TransitionError
			require.ErrorAs(t, updateErr, &te)
			require.Len(t, cs, 1)
			continue
		}
		require.Len(t, cs, 2)
		for key, c := range cs {
			if key != sub.CurrentPeriod().Key {
				require.Equal(t, charges.Voided, c.Status, "the adjustment of a cancelled subscription")
			}
		}
	}
}

// An upgrade races a pause: after the pause it is refused (a paused
// subscription is not prorated); before it, its adjustment stays owed
// (its period began before the pause), like the period's charge.
func TestUpdateRacesAPause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 4 {
		sub := b.create(t, period.Month, nil)
		b.scan(t)
		b.settle(t, sub, sub.CurrentPeriod().Key, charges.Succeeded)
		b.clock.Advance(time.Hour)
		var updateErr error
		b.whileLocked(t, sub, 2, func() {
			_, _, updateErr = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(3000))}, subscriptions.ProrationChargeNow)
		}, func() {
			b.inTx(t, func(tx pgx.Tx) error {
				_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, nil, "", subscriptions.System)
				return err
			})
		})
		got := b.get(t, sub)
		require.Equal(t, subscriptions.Paused, got.Status)
		cs := b.charges(t, sub)
		if updateErr != nil {
			var te *fsm.TransitionError
			require.ErrorAs(t, updateErr, &te)
			require.Equal(t, int64(1500), got.Amount)
			require.Len(t, cs, 1)
			continue
		}
		require.Equal(t, int64(3000), got.Amount)
		require.Len(t, cs, 2)
		for key, c := range cs {
			if key != sub.CurrentPeriod().Key {
				require.Equal(t, charges.Scheduled, c.Status, "the adjustment is still owed")
			}
		}
	}
}

// A pause whose resume_at passed before any scan carried it out: a change
// then finds the period the resume began already under way, so that
// period is charged at the price in force when it began and the change
// applies from the next.
func TestUpdateAfterAnOverdueResumeKeepsTheResumedPeriodsPrice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	resumeAt := time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, &resumeAt, "", subscriptions.System)
		return err
	})
	b.clock.Set(resumeAt.Add(72 * time.Hour)) // no scan meanwhile
	got, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(900))}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, subscriptions.Active, got.Status, "resumed as of its resume_at")
	require.Equal(t, int64(900), got.Amount)
	c, ok := b.charges(t, sub)["2027-01-20"]
	require.True(t, ok, "the period the resume began is charged: %v", b.charges(t, sub))
	require.Equal(t, sub.Amount, c.Amount, "at the price in force when it began")
}

// A cancel drops the pending update: it would apply at a period that
// never begins, and removing it afterwards writes nothing after the
// cancel.
func TestCancelDropsThePendingUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	_, _, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(700)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.CancelAt(context.Background(), tx, sub.ID, b.clock.Now(), subscriptions.System)
		return err
	})
	got := b.get(t, sub)
	require.Nil(t, got.PendingUpdate)
	var changed bool
	b.inTx(t, func(tx pgx.Tx) error {
		_, changed, err = b.subs.RemovePendingUpdate(context.Background(), tx, sub.ID, subscriptions.System)
		return err
	})
	require.False(t, changed, "nothing waits any more")
	var removed int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM subscription_changes WHERE subscription_id = $1 AND removed_at IS NOT NULL`, sub.ID).Scan(&removed))
	require.Equal(t, 1, removed, "the change's ledger row says it never applied")
}

// A pending change of the interval alone, with the price changed now
// meanwhile: at the boundary the interval changes and the price stays the
// one changed now; the ledger row of the pending change records the terms
// as they were when it applied, so the price in force can be read from
// the ledger alone.
func TestPendingIntervalChangeKeepsAPriceChangedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.paidMonth(t)
	week := period.Week
	pending, _, err := b.update(t, sub, subscriptions.Update{Interval: &week, Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	_, _, err = b.update(t, sub, subscriptions.Update{Amount: ptr(int64(900))}, subscriptions.ProrationNone)
	require.NoError(t, err)
	b.clock.Set(time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC))
	b.scan(t)
	require.Equal(t, int64(900), b.charges(t, sub)["2027-01-01"].Amount, "the boundary's period at the price changed meanwhile")
	got := b.get(t, sub)
	require.Equal(t, period.Week, got.Interval)
	var before, after int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT amount_before, amount_after FROM subscription_changes
		WHERE id = $1`, pending.PendingUpdate.ID).Scan(&before, &after))
	require.Equal(t, [2]int64{900, 900}, [2]int64{before, after}, "the applied change's row shows the terms it applied to")
}
