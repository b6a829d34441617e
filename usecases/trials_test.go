package usecases_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/usecases"
)

// trialService is the use cases over a real database, its charges'
// jobs inserted and never worked.
func trialService(t *testing.T) (*usecases.Service, *testsupport.Clock) {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	subs := subscriptions.NewStore(clk)
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	ren := &renewals.Renewals{Pool: pool, Subscriptions: subs, Clock: clk, Charges: &charges.Store{Queue: insertOnly},
		CatchUpWindow: 90 * 24 * time.Hour, BatchSize: 10, ScanWorkers: 1, ScanInterval: time.Minute, Logger: zerolog.Nop()}
	return &usecases.Service{Pool: pool, Subscriptions: subs, Renewals: ren, Clock: clk,
		KnownGateway: func(string) bool { return true }}, clk
}

func trialCall[T any](t *testing.T, svc *usecases.Service, fn func(tx pgx.Tx) (T, error)) (T, error) {
	t.Helper()
	var out T
	err := pgx.BeginFunc(context.Background(), svc.Pool, func(tx pgx.Tx) (err error) {
		out, err = fn(tx)
		return err
	})
	return out, err
}

func periodKeys(t *testing.T, svc *usecases.Service, id uuid.UUID) []string {
	t.Helper()
	cs, err := charges.ListBySubscription(context.Background(), svc.Pool, id, [16]byte{}, 100)
	require.NoError(t, err)
	var keys []string
	for _, c := range cs {
		keys = append(keys, c.PeriodKey)
	}
	return keys
}

// Ending a trial now makes the subscription active, anchored now, with its
// first period charged in the same transaction; ending it again returns
// it unchanged and charges nothing more. A customer cannot end another
// customer's trial, and a paused or cancelled subscription has no trial
// to end.
func TestEndTrialNowChargesOnceAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, clk := trialService(t)
	staff := usecases.Caller{Actor: subscriptions.Actor{ID: "key-1", Role: "support"}}
	days := 30
	sub, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
		return svc.CreateSubscription(ctx, tx, staff, subscriptions.New{CustomerID: "cust-1", Amount: 1500, Currency: "USD",
			Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", TrialPeriodDays: &days,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035}})
	})
	require.NoError(t, err)
	require.Equal(t, subscriptions.Trialing, sub.Status)
	require.Empty(t, periodKeys(t, svc, sub.ID))

	other := usecases.Caller{Actor: subscriptions.Actor{ID: "key-2", Role: "customer"}, CustomerID: "cust-2"}
	_, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.EndTrial(ctx, tx, other, sub.ID) })
	require.ErrorIs(t, err, subscriptions.ErrNotFound)

	clk.Advance(5*24*time.Hour + time.Hour)
	now := clk.Now()
	owner := usecases.Caller{Actor: subscriptions.Actor{ID: "key-3", Role: "customer"}, CustomerID: "cust-1"}
	for range 2 {
		got, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.EndTrial(ctx, tx, owner, sub.ID) })
		require.NoError(t, err)
		require.Equal(t, subscriptions.Active, got.Status)
		require.Equal(t, now, got.BillingAnchor)
		require.Equal(t, now, *got.TrialEnd)
		require.Equal(t, 1, got.NextPeriodIndex, "the first period is charged")
		require.Equal(t, now.AddDate(0, 1, 0), got.NextChargeAt)
		require.Equal(t, []string{"2026-12-06"}, periodKeys(t, svc, sub.ID))
	}
	events, err := svc.Events(ctx, owner, sub.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, "trial_ended", events[1].Type)
	require.Equal(t, "key-3", events[1].Actor.ID)

	// The scan later finds no trial to end and nothing more to charge.
	res, err := svc.Renewals.Scan(ctx, clk.Now())
	require.NoError(t, err)
	require.Zero(t, res.TrialsEnded)
	require.Zero(t, res.Enqueued)

	_, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.Pause(ctx, tx, staff, sub.ID, nil, "") })
	require.NoError(t, err)
	_, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.EndTrial(ctx, tx, staff, sub.ID) })
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te, "paused: no trial to end")
	require.Equal(t, "paused", te.From)
}

// A trial cancelled now, or set to cancel at its end, charges nothing; a
// trial set to cancel at its end is not ended early; a trial is not
// paused.
func TestCancelDuringTrialUseCases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, clk := trialService(t)
	staff := usecases.Caller{Actor: subscriptions.Actor{ID: "key-1", Role: "support"}}
	create := func() subscriptions.Subscription {
		end := clk.Now().Add(48 * time.Hour)
		sub, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
			return svc.CreateSubscription(ctx, tx, staff, subscriptions.New{CustomerID: "cust-1", Amount: 1500, Currency: "USD",
				Interval: period.Week, IntervalCount: 1, TimeZone: "UTC", TrialEnd: &end,
				PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035}})
		})
		require.NoError(t, err)
		return sub
	}
	now, atEnd := create(), create()

	_, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.Pause(ctx, tx, staff, now.ID, nil, "") })
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "a trial charges nothing; cancel it or end it", te.Reason)

	got, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.Cancel(ctx, tx, staff, now.ID, false) })
	require.NoError(t, err)
	require.Equal(t, subscriptions.Cancelled, got.Status)
	got, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.Cancel(ctx, tx, staff, atEnd.ID, true) })
	require.NoError(t, err)
	require.Equal(t, subscriptions.Trialing, got.Status)
	require.True(t, got.CancelAtPeriodEnd)
	_, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.EndTrial(ctx, tx, staff, atEnd.ID) })
	require.ErrorAs(t, err, &te)

	clk.Advance(30 * 24 * time.Hour)
	_, err = svc.Renewals.Scan(ctx, clk.Now())
	require.NoError(t, err)
	for _, sub := range []subscriptions.Subscription{now, atEnd} {
		got, err := svc.Subscription(ctx, staff, sub.ID)
		require.NoError(t, err)
		require.Equal(t, subscriptions.Cancelled, got.Status)
		require.Empty(t, periodKeys(t, svc, sub.ID))
	}
}

// Ending trials now while scans end the same trials, whose end has come:
// whichever wins, each trial ends once and its first period is charged
// once.
func TestEndTrialRacingTheScanChargesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, clk := trialService(t)
	staff := usecases.Caller{Actor: subscriptions.Actor{ID: "key-1", Role: "support"}}
	days := 1
	subs := make([]subscriptions.Subscription, 6)
	for i := range subs {
		var err error
		subs[i], err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
			return svc.CreateSubscription(ctx, tx, staff, subscriptions.New{CustomerID: "cust-1", Amount: 1500, Currency: "USD",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", TrialPeriodDays: &days,
				PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035}})
		})
		require.NoError(t, err)
	}
	clk.Advance(25 * time.Hour)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) { return svc.EndTrial(ctx, tx, staff, sub.ID) })
			assert.NoError(t, err)
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := svc.Renewals.Scan(ctx, clk.Now())
			assert.NoError(t, err)
		}()
	}
	close(start)
	wg.Wait()
	for _, sub := range subs {
		require.Len(t, periodKeys(t, svc, sub.ID), 1, "one charge of the first period")
		events, err := svc.Events(ctx, staff, sub.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, events, 2, "created and trial_ended, once")
		got, err := svc.Subscription(ctx, staff, sub.ID)
		require.NoError(t, err)
		require.Equal(t, subscriptions.Active, got.Status)
		require.Equal(t, 1, got.NextPeriodIndex)
	}
}

// A trial whose end has come, which no scan has reached yet, is not a
// trial any more: a pause or a cancel at period end first ends it as of
// its end and charges its first period, which is owed, as a period the
// scan had not reached before a pause is.
func TestTrialPastItsEndEndsBeforeAPauseOrACancelAtPeriodEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, clk := trialService(t)
	staff := usecases.Caller{Actor: subscriptions.Actor{ID: "key-1", Role: "support"}}
	days := 3
	create := func() subscriptions.Subscription {
		sub, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
			return svc.CreateSubscription(ctx, tx, staff, subscriptions.New{CustomerID: "cust-1", Amount: 1500, Currency: "USD",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", TrialPeriodDays: &days,
				PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2035}})
		})
		require.NoError(t, err)
		return sub
	}
	paused, cancelling := create(), create()
	clk.Advance(4 * 24 * time.Hour)

	got, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
		return svc.Pause(ctx, tx, staff, paused.ID, nil, "")
	})
	require.NoError(t, err)
	require.Equal(t, subscriptions.Paused, got.Status)
	require.Equal(t, []string{"2026-12-04"}, periodKeys(t, svc, paused.ID))

	got, err = trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
		return svc.Cancel(ctx, tx, staff, cancelling.ID, true)
	})
	require.NoError(t, err)
	require.Equal(t, subscriptions.Active, got.Status)
	require.True(t, got.CancelAtPeriodEnd, "at the end of the first period")
	require.Equal(t, *cancelling.TrialEnd, got.BillingAnchor, "the trial ended at its end")
	require.Equal(t, []string{"2026-12-04"}, periodKeys(t, svc, cancelling.ID))
	events, err := svc.Events(ctx, staff, cancelling.ID, 0, 10)
	require.NoError(t, err)
	require.Equal(t, "trial_ended", events[1].Type)
	require.Equal(t, "system", events[1].Actor.ID)
}
