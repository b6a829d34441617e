package renewals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

type testBundle struct {
	pool     *pgxpool.Pool
	clock    *testsupport.Clock
	subs     *subscriptions.Store
	renewals *renewals.Renewals
}

func setup(t *testing.T) testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	subs := subscriptions.NewStore(clk)
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return testBundle{pool: pool, clock: clk, subs: subs, renewals: &renewals.Renewals{
		Pool: pool, Subscriptions: subs, Clock: clk, Charges: &charges.Store{Queue: insertOnly}, CatchUpWindow: 90 * 24 * time.Hour,
		BatchSize: 2, ScanWorkers: 2, ScanInterval: time.Minute, Logger: zerolog.Nop(),
	}}
}

// create makes a subscription as the API would, without charging it.
func (b testBundle) create(t *testing.T, interval period.Interval, anchor *time.Time) subscriptions.Subscription {
	t.Helper()
	var sub subscriptions.Subscription
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		sub, err = b.subs.Create(context.Background(), tx, subscriptions.New{
			CustomerID: "cust-1", Amount: 1500, Currency: "USD", Interval: interval, IntervalCount: 1, TimeZone: "UTC",
			BillingAnchor: anchor,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035},
		}, subscriptions.System, nil)
		return err
	}))
	return sub
}

func (b testBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, fn))
}

func (b testBundle) scan(t *testing.T) renewals.ScanResult {
	t.Helper()
	res, err := b.renewals.Scan(context.Background(), b.clock.Now())
	require.NoError(t, err)
	return res
}

func (b testBundle) periodKeys(t *testing.T, sub subscriptions.Subscription) []string {
	t.Helper()
	cs, err := charges.ListBySubscription(context.Background(), b.pool, sub.ID, [16]byte{}, 100)
	require.NoError(t, err)
	keys := make([]string, len(cs))
	for i, c := range cs {
		keys[len(cs)-1-i] = c.PeriodKey // oldest first
	}
	return keys
}

func TestScanChargesEachDuePeriodOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	require.Equal(t, 1, b.scan(t).Enqueued)
	require.Zero(t, b.scan(t).Enqueued, "a second scan finds nothing due")
	require.Equal(t, []string{"2026-12-01"}, b.periodKeys(t, sub))

	charge, err := charges.ListBySubscription(context.Background(), b.pool, sub.ID, [16]byte{}, 1)
	require.NoError(t, err)
	rivertest.RequireInserted[*riverpgxv5.Driver](context.Background(), t, riverpgxv5.New(b.pool),
		charges.AuthorizeArgs{ChargeID: charge[0].ID, Attempt: 1}, nil)

	b.clock.Advance(31 * 24 * time.Hour)
	require.Equal(t, 1, b.scan(t).Enqueued)
	require.Equal(t, []string{"2026-12-01", "2027-01-01"}, b.periodKeys(t, sub))
}

// Several scans at once (two walkers each, batches of two) over many due
// subscriptions: SKIP LOCKED and the unique period key make one charge per
// period whoever gets there first.
func TestConcurrentScansChargeOncePerPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	subs := make([]subscriptions.Subscription, 9)
	for i := range subs {
		subs[i] = b.create(t, period.Week, nil)
	}
	b.clock.Advance(15 * 24 * time.Hour) // three periods each
	var wg sync.WaitGroup
	total := make([]int, 4)
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.renewals.Scan(context.Background(), b.clock.Now())
			require.NoError(t, err)
			total[i] = res.Enqueued
		}()
	}
	wg.Wait()
	sum := 0
	for _, n := range total {
		sum += n
	}
	require.Equal(t, 27, sum)
	for _, sub := range subs {
		require.Equal(t, []string{"2026-12-01", "2026-12-08", "2026-12-15"}, b.periodKeys(t, sub))
	}
}

// After an outage longer than the catch-up window, the current period and
// those that began within the window are charged; older ones are skipped.
func TestCatchUpIsBoundedByTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	yearly := b.create(t, period.Year, nil)
	monthly := b.create(t, period.Month, nil)
	b.scan(t)
	b.clock.Advance(5*365*24*time.Hour + 48*time.Hour)
	b.scan(t)
	require.Equal(t, []string{"2026-12-01", "2031-12-01"}, b.periodKeys(t, yearly), "the current year only")
	require.Equal(t, []string{"2026-12-01", "2031-10-01", "2031-11-01", "2031-12-01"}, b.periodKeys(t, monthly),
		"the months that began in the last 90 days, the current one included")
}

// A cancel scheduled before the first anchor takes effect at the anchor:
// the first period is not charged.
func TestScheduledCancelBeforeTheAnchorChargesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	anchor := b.clock.Now().Add(30 * 24 * time.Hour)
	sub := b.create(t, period.Month, &anchor)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Cancel(context.Background(), tx, sub.ID, true, subscriptions.System)
		return err
	})
	b.clock.Advance(31 * 24 * time.Hour)
	b.scan(t)
	got, err := b.subs.Get(context.Background(), b.pool, sub.ID)
	require.NoError(t, err)
	require.Equal(t, subscriptions.Cancelled, got.Status)
	require.WithinDuration(t, anchor, *got.CancelledAt, 0, "as of the end of the trial")
	require.Empty(t, b.periodKeys(t, sub))
}

// The period ends while paused with a cancel scheduled: the scan cancels
// it as of that end, and nothing more is charged.
func TestScheduledCancelTakesEffectWhilePaused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	b.inTx(t, func(tx pgx.Tx) error {
		if _, _, err := b.subs.Cancel(context.Background(), tx, sub.ID, true, subscriptions.System); err != nil {
			return err
		}
		_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, nil, "", subscriptions.System)
		return err
	})
	b.clock.Advance(45 * 24 * time.Hour)
	require.Equal(t, 1, b.scan(t).Cancelled)
	got, err := b.subs.Get(context.Background(), b.pool, sub.ID)
	require.NoError(t, err)
	require.Equal(t, subscriptions.Cancelled, got.Status)
	require.WithinDuration(t, time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), *got.CancelledAt, 0, "as of the period's end")
	require.Equal(t, []string{"2026-12-01"}, b.periodKeys(t, sub))
}

// A scheduled resume runs as of resume_at even when the scan comes late,
// and the period that then begins is charged.
func TestScheduledResumeStartsItsPeriodAtResumeAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t, period.Month, nil)
	b.scan(t)
	resumeAt := b.clock.Now().Add(10 * 24 * time.Hour)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Pause(context.Background(), tx, sub.ID, &resumeAt, "", subscriptions.System)
		return err
	})
	b.clock.Advance(12 * 24 * time.Hour)
	res := b.scan(t)
	require.Equal(t, 1, res.Resumed)
	require.Equal(t, 1, res.Enqueued)
	require.Equal(t, []string{"2026-12-01", "2026-12-11"}, b.periodKeys(t, sub))
}
