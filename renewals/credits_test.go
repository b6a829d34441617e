package renewals_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// creditUse is a row of the credit ledger.
type creditUse struct {
	Key    string
	Amount int64
}

// credits is the subscription's credit ledger, oldest first.
func (b testBundle) credits(t *testing.T, sub subscriptions.Subscription) []creditUse {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT coalesce(period_key, ''), amount FROM subscription_credits
		WHERE subscription_id = $1 ORDER BY id`, sub.ID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[creditUse])
	require.NoError(t, err)
	return out
}

// pause pauses sub now, as the API does: the periods due are charged first.
func (b testBundle) pause(t *testing.T, sub subscriptions.Subscription, resumeAt *time.Time) {
	t.Helper()
	b.inTx(t, func(tx pgx.Tx) error {
		locked, err := b.subs.GetForUpdate(context.Background(), tx, sub.ID)
		if err != nil {
			return err
		}
		if _, err := b.renewals.Due(context.Background(), tx, locked); err != nil {
			return err
		}
		_, _, err = b.subs.Pause(context.Background(), tx, sub.ID, resumeAt, subscriptions.StartNewPeriod, subscriptions.System)
		return err
	})
}

// resume resumes sub now, as the API does: the period it begins is
// charged in the same transaction.
func (b testBundle) resume(t *testing.T, sub subscriptions.Subscription) {
	t.Helper()
	b.inTx(t, func(tx pgx.Tx) error {
		resumed, _, err := b.subs.Resume(context.Background(), tx, sub.ID, subscriptions.System)
		if err != nil {
			return err
		}
		_, err = b.renewals.Due(context.Background(), tx, resumed)
		return err
	})
}

// requireCreditsReduceCharges: every credit a period used reduced that
// period's charge by exactly that amount (or paid the period whole), and
// no period used credit on top of a charge of its full price.
func requireCreditsReduceCharges(t *testing.T, b testBundle, sub subscriptions.Subscription, prices map[string]int64) {
	t.Helper()
	cs := b.charges(t, sub)
	for _, u := range b.credits(t, sub) {
		if u.Amount > 0 {
			continue
		}
		c, charged := cs[u.Key]
		got := -u.Amount
		if charged {
			got += c.Amount
		}
		require.Equal(t, prices[u.Key], got, "period %s: charged %d (charged: %t) and used %d of credit", u.Key, c.Amount, charged, -u.Amount)
	}
}

// A resume that begins a period on the day an already charged period
// began starts that same period (its key), paid once: it is not charged
// again and uses no credit. A downgrade made in the instant of the first
// resume credited the unused difference of that period, whose charge was
// captured at the full price; the credit must wait for the next periods'
// charges, not be spent on the period that earned it (nor on one paid
// whole by credit before).
func TestResumeOnTheDayOfAChargedPeriodUsesNoCredit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		downgrade int64 // 1500 -> downgrade with the whole period unused: credit 1500-downgrade
	}{
		{name: "credit below the new price", downgrade: 1000},
		{name: "credit above the new price", downgrade: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			sub := b.create(t, period.Month, nil)
			require.Equal(t, 1, b.scan(t).Enqueued)
			b.settle(t, sub, "2026-12-01", charges.Succeeded)
			b.clock.Advance(10 * 24 * time.Hour)
			b.pause(t, sub, nil)

			// Dec 20 09:00: resume, downgrade and pause in one instant.
			b.clock.Advance(9 * 24 * time.Hour)
			b.resume(t, sub)
			b.settle(t, sub, "2026-12-20", charges.Succeeded)
			_, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(tc.downgrade)}, subscriptions.ProrationChargeNow)
			require.NoError(t, err)
			credit := 1500 - tc.downgrade
			require.Equal(t, -credit, ch.Adjustment, "the whole period unused")
			resumeAt := b.clock.Now().Add(6*time.Hour + 30*time.Minute)
			b.pause(t, sub, &resumeAt)

			// The scheduled resume begins period 2026-12-20 again.
			b.clock.Advance(7 * time.Hour)
			require.Equal(t, 1, b.scan(t).Resumed)
			got := b.get(t, sub)
			require.Equal(t, subscriptions.Active, got.Status)
			require.Equal(t, resumeAt.AddDate(0, 1, 0), got.NextChargeAt)
			require.Equal(t, credit, got.CreditBalance, "the period paid at 1500 keeps the credit it earned")
			require.Equal(t, []creditUse{{Key: "2026-12-20", Amount: credit}}, b.credits(t, sub))
			require.Equal(t, []string{"2026-12-01", "2026-12-20"}, b.periodKeys(t, sub))
			require.Equal(t, int64(1500), b.charges(t, sub)["2026-12-20"].Amount)

			// The next period is at the new price, less the credit.
			b.clock.Set(resumeAt.AddDate(0, 1, 0))
			b.scan(t)
			use := min(credit, tc.downgrade)
			require.Equal(t, []creditUse{{Key: "2026-12-20", Amount: credit}, {Key: "2027-01-20", Amount: -use}}, b.credits(t, sub))
			require.Equal(t, credit-use, b.get(t, sub).CreditBalance)
			requireCreditsReduceCharges(t, b, sub, map[string]int64{"2027-01-20": tc.downgrade})
		})
	}
}

// A period paid whole by credit is paid: a resume on its day begins it
// again and charges nothing for it, with the credit left kept for later.
func TestResumeOnTheDayOfAPeriodPaidByCreditChargesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	require.Equal(t, 1, b.scan(t).Enqueued)
	b.settle(t, sub, "2026-12-01", charges.Succeeded)
	_, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(600))}, subscriptions.ProrationCreditNext)
	require.NoError(t, err)
	require.Equal(t, int64(-900), ch.Adjustment, "the whole period unused")

	b.clock.Set(time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC))
	require.Zero(t, b.scan(t).Enqueued, "January is paid by credit")
	require.Equal(t, int64(300), b.get(t, sub).CreditBalance)
	b.clock.Advance(time.Hour)
	resumeAt := b.clock.Now().Add(time.Hour)
	b.pause(t, sub, &resumeAt)
	b.clock.Advance(2 * time.Hour)
	require.Equal(t, 1, b.scan(t).Resumed)
	require.Equal(t, []string{"2026-12-01"}, b.periodKeys(t, sub), "period 2027-01-01 was paid by credit: no charge of it")
	require.Equal(t, int64(300), b.get(t, sub).CreditBalance)
	require.Equal(t, []creditUse{{Key: "2026-12-01", Amount: 900}, {Key: "2027-01-01", Amount: -600}}, b.credits(t, sub))
}

// Two changes racing after a scheduled resume's time, each carrying the
// resume out before it changes the terms: one resumes, the period it
// begins on the day of the charged period is that period, and neither
// charges it again nor uses the credit on it.
func TestChangesRacingAResumeOnTheDayOfAChargedPeriodUseNoCredit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		sub := b.create(t, period.Month, nil)
		b.scan(t)
		key := b.get(t, sub).CurrentPeriod().Key
		b.settle(t, sub, key, charges.Succeeded)
		_, ch, err := b.update(t, sub, subscriptions.Update{Amount: ptr(int64(1000))}, subscriptions.ProrationChargeNow)
		require.NoError(t, err)
		require.Equal(t, int64(-500), ch.Adjustment)
		resumeAt := b.clock.Now().Add(time.Hour)
		b.pause(t, sub, &resumeAt)
		b.clock.Advance(2 * time.Hour)

		errs := make([]error, 2)
		fns := make([]func(), len(errs))
		for i := range errs {
			fns[i] = func() {
				_, _, errs[i] = b.update(t, sub, subscriptions.Update{Description: ptr("change " + string(rune('a'+i)))}, subscriptions.ProrationNone)
			}
		}
		b.whileLocked(t, sub, 2, fns...)
		require.NoError(t, errors.Join(errs...))
		b.scan(t)
		got := b.get(t, sub)
		require.Equal(t, subscriptions.Active, got.Status)
		require.Equal(t, resumeAt.AddDate(0, 1, 0), got.NextChargeAt)
		require.Equal(t, int64(500), got.CreditBalance)
		require.Equal(t, []creditUse{{Key: key, Amount: 500}}, b.credits(t, sub))
		require.Equal(t, []string{key}, b.periodKeys(t, sub))
		var resumed int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM subscription_events
			WHERE subscription_id = $1 AND type = 'resumed'`, sub.ID).Scan(&resumed))
		require.Equal(t, 1, resumed)
		b.clock.Advance(24 * time.Hour) // the next subscription starts on another day
	}
}
