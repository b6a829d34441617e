package renewals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// createTrial makes a subscription with a trial of days through the
// create path that charges the periods due at once.
func (b testBundle) createTrial(t *testing.T, days int) subscriptions.Subscription {
	t.Helper()
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.renewals.Create(context.Background(), tx, subscriptions.New{
			CustomerID: "cust-1", Amount: 1500, Currency: "USD", Interval: period.Month, IntervalCount: 1, TimeZone: "UTC",
			TrialPeriodDays: &days,
			PaymentMethod:   rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035},
		}, subscriptions.System)
		return err
	})
	return sub
}

func (b testBundle) eventTypes(t *testing.T, sub subscriptions.Subscription) []string {
	t.Helper()
	events, err := b.subs.Events(context.Background(), b.pool, sub.ID, 0, 100)
	require.NoError(t, err)
	var out []string
	for _, e := range events {
		out = append(out, e.Type+":"+e.Actor.ID)
	}
	return out
}

// Nothing is charged during a trial; the scan after its end makes the
// subscription active and charges the period that begins at the trial's
// end, in the same transaction, keyed by its date.
func TestScanEndsTrialAndChargesItsFirstPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.createTrial(t, 14)
	require.Equal(t, subscriptions.Trialing, sub.Status)
	require.Empty(t, b.periodKeys(t, sub), "created without a charge")

	b.clock.Advance(14*24*time.Hour - time.Second)
	res := b.scan(t)
	require.Zero(t, res.TrialsEnded)
	require.Zero(t, res.Enqueued)
	require.Empty(t, b.periodKeys(t, sub))

	b.clock.Advance(time.Hour) // the scan comes late: the period still begins at the trial's end
	res = b.scan(t)
	require.Equal(t, 1, res.TrialsEnded)
	require.Equal(t, []string{"2026-12-15"}, b.periodKeys(t, sub))
	got := b.get(t, sub)
	require.Equal(t, subscriptions.Active, got.Status)
	end := time.Date(2026, 12, 15, 9, 0, 0, 0, time.UTC)
	require.Equal(t, end, got.BillingAnchor)
	require.Equal(t, end, *got.TrialEnd)
	require.Equal(t, 1, got.NextPeriodIndex)
	require.Equal(t, end.AddDate(0, 1, 0), got.NextChargeAt)
	require.Equal(t, []string{"created:system", "trial_ended:system"}, b.eventTypes(t, sub))

	cs, err := charges.ListBySubscription(context.Background(), b.pool, sub.ID, [16]byte{}, 10)
	require.NoError(t, err)
	require.Equal(t, end, cs[0].PeriodStart.UTC())
	require.Equal(t, int64(1500), cs[0].Amount)

	res = b.scan(t)
	require.Zero(t, res.TrialsEnded)
	require.Zero(t, res.Enqueued)
}

// Scans running at once, on many trials that ended (two walkers each,
// batches of two): each trial ends once and its first period is charged
// once, whichever scan claims it.
func TestConcurrentScansEndEachTrialOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	subs := make([]subscriptions.Subscription, 7)
	for i := range subs {
		subs[i] = b.createTrial(t, 3)
	}
	b.clock.Advance(3*24*time.Hour + time.Minute)
	var wg sync.WaitGroup
	ended := make([]int, 2)
	start := make(chan struct{})
	for i := range ended {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := b.renewals.Scan(context.Background(), b.clock.Now())
			assert.NoError(t, err)
			ended[i] = res.TrialsEnded
		}()
	}
	close(start)
	wg.Wait()
	require.Equal(t, len(subs), ended[0]+ended[1])
	for _, sub := range subs {
		require.Equal(t, []string{"2026-12-04"}, b.periodKeys(t, sub))
		require.Equal(t, []string{"created:system", "trial_ended:system"}, b.eventTypes(t, sub))
	}
}

// A trial cancelled now, or at its period end (the trial's end), charges
// nothing: the scheduled cancel takes effect at the trial's end instead
// of its first period.
func TestCancelDuringTrialChargesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.createTrial(t, 10)
	atEnd := b.createTrial(t, 10)
	b.inTx(t, func(tx pgx.Tx) error {
		if _, _, err := b.subs.Cancel(ctx, tx, now.ID, false, subscriptions.System); err != nil {
			return err
		}
		_, _, err := b.subs.Cancel(ctx, tx, atEnd.ID, true, subscriptions.System)
		return err
	})
	require.Equal(t, subscriptions.Cancelled, b.get(t, now).Status)
	require.Equal(t, subscriptions.Trialing, b.get(t, atEnd).Status)

	b.clock.Advance(40 * 24 * time.Hour)
	b.scan(t)
	for _, sub := range []subscriptions.Subscription{now, atEnd} {
		require.Empty(t, b.periodKeys(t, sub))
		require.Equal(t, subscriptions.Cancelled, b.get(t, sub).Status)
	}
	require.WithinDuration(t, *atEnd.TrialEnd, *b.get(t, atEnd).CancelledAt, 0, "as of the trial's end")
	require.Equal(t, []string{"created:system", "cancel_scheduled:system", "cancelled:system"}, b.eventTypes(t, atEnd))
}

// The self-audit finds a trial still on after its end (its first period
// would otherwise be charged zero times) until the scan ends it; a trial
// set to cancel at its end owes nothing.
func TestTrialLeftAfterItsEndIsOverdue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.createTrial(t, 2)
	cancelling := b.createTrial(t, 2)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.subs.Cancel(ctx, tx, cancelling.ID, true, subscriptions.System)
		return err
	})
	from := b.clock.Now()
	b.clock.Advance(3 * 24 * time.Hour)
	overdue, err := subscriptions.Overdue(ctx, b.pool, from, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, []subscriptions.OverduePeriod{{SubscriptionID: sub.ID, Start: *sub.TrialEnd}}, overdue)
	b.scan(t)
	overdue, err = subscriptions.Overdue(ctx, b.pool, from, b.clock.Now())
	require.NoError(t, err)
	require.Empty(t, overdue)
}
