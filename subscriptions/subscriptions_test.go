package subscriptions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/fsmtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

func TestCanTransition(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, subscriptions.Machine, map[subscriptions.Status][]subscriptions.Status{
		subscriptions.Trialing:  {subscriptions.Active, subscriptions.Cancelled},
		subscriptions.Active:    {subscriptions.Paused, subscriptions.PastDue, subscriptions.Unpaid, subscriptions.Cancelled},
		subscriptions.Paused:    {subscriptions.Active, subscriptions.Cancelled},
		subscriptions.PastDue:   {subscriptions.Active, subscriptions.Unpaid, subscriptions.Cancelled},
		subscriptions.Unpaid:    {subscriptions.Active, subscriptions.PastDue, subscriptions.Cancelled},
		subscriptions.Cancelled: nil,
	})
	require.False(t, subscriptions.CanTransition(subscriptions.Paused, subscriptions.PastDue), "a paused subscription charges nothing")
	require.False(t, subscriptions.CanTransition(subscriptions.Cancelled, subscriptions.Active), "cancelled is final")
	require.False(t, subscriptions.CanTransition(subscriptions.Trialing, subscriptions.Paused), "a trial charges nothing to pause")
}

// No SQL names a subscription status: conditions are built from the
// constants (billingSQL for the partial index's predicate).
func TestNoSubscriptionStatusLiteral(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoLiterals(t, subscriptions.Statuses)
}

type testBundle struct {
	pool  *pgxpool.Pool
	store *subscriptions.Store
	clock *testsupport.Clock
}

func setup(t *testing.T) testBundle {
	t.Helper()
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	return testBundle{pool: dbtest.Pool(t), store: subscriptions.NewStore(clk), clock: clk}
}

var actor = subscriptions.Actor{ID: "key-1", Role: "support"}

func (b testBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, fn))
}

func (b testBundle) create(t *testing.T) subscriptions.Subscription {
	t.Helper()
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(context.Background(), tx, subscriptions.New{
			CustomerID: "cust-1", Amount: 49900, Currency: "RUB", Interval: period.Month, IntervalCount: 1,
			TimeZone:      "Europe/Moscow",
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_1", Last4: "4242", ExpMonth: 12, ExpYear: 2030},
		}, actor, nil)
		return err
	})
	return sub
}

func (b testBundle) events(t *testing.T, sub subscriptions.Subscription) []string {
	t.Helper()
	events, err := b.store.Events(context.Background(), b.pool, sub.ID, 0, 100)
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	return types
}

func TestRepeatedTransitionsWriteOneEventEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.create(t)

	for i := 0; i < 3; i++ {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.Pause(ctx, tx, sub.ID, nil, "", actor)
			require.Equal(t, i == 0, changed)
			require.Equal(t, subscriptions.Paused, got.Status)
			return err
		})
	}
	for i := 0; i < 3; i++ {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.Resume(ctx, tx, sub.ID, actor)
			require.Equal(t, i == 0, changed)
			require.Equal(t, subscriptions.Active, got.Status)
			return err
		})
	}
	for i := 0; i < 3; i++ {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.Cancel(ctx, tx, sub.ID, false, actor)
			require.Equal(t, i == 0, changed)
			require.Equal(t, subscriptions.Cancelled, got.Status)
			require.NotNil(t, got.CancelledAt)
			return err
		})
	}
	require.Equal(t, []string{"created", "paused", "resumed", "cancelled"}, b.events(t, sub))
}

func TestForbiddenTransitionChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.create(t)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.Cancel(ctx, tx, sub.ID, false, actor)
		return err
	})
	before, err := b.store.Get(ctx, b.pool, sub.ID)
	require.NoError(t, err)

	for name, change := range map[string]func(tx pgx.Tx) error{
		"resume": func(tx pgx.Tx) error { _, _, err := b.store.Resume(ctx, tx, sub.ID, actor); return err },
		"pause":  func(tx pgx.Tx) error { _, _, err := b.store.Pause(ctx, tx, sub.ID, nil, "", actor); return err },
		"payment method": func(tx pgx.Tx) error {
			_, _, err := b.store.ChangePaymentMethod(ctx, tx, sub.ID, rebilltype.PaymentMethod{Gateway: "sim2", Token: "tok_ok_2", ExpMonth: 1, ExpYear: 2031}, actor)
			return err
		},
	} {
		err := pgx.BeginFunc(ctx, b.pool, change)
		var te *fsm.TransitionError
		require.True(t, errors.As(err, &te), "%s: %v", name, err)
		require.Equal(t, "subscription", te.Machine)
	}
	after, err := b.store.Get(ctx, b.pool, sub.ID)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, []string{"created", "cancelled"}, b.events(t, sub))
}

func TestResumeStartsNewPeriodNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.create(t)
	b.inTx(t, func(tx pgx.Tx) error { _, _, err := b.store.Pause(ctx, tx, sub.ID, nil, "", actor); return err })
	b.clock.Advance(45 * 24 * time.Hour)
	var resumed subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) { resumed, _, err = b.store.Resume(ctx, tx, sub.ID, actor); return err })
	require.Equal(t, b.clock.Now(), resumed.BillingAnchor)
	require.Equal(t, b.clock.Now(), resumed.NextChargeAt)
	require.Nil(t, resumed.PausedAt)
}

func TestCancelAtPeriodEndIsScheduledOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.create(t)
	for i := 0; i < 2; i++ {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.Cancel(ctx, tx, sub.ID, true, actor)
			require.Equal(t, i == 0, changed)
			require.True(t, got.CancelAtPeriodEnd)
			require.Equal(t, subscriptions.Active, got.Status)
			return err
		})
	}
	require.Equal(t, []string{"created", "cancel_scheduled"}, b.events(t, sub))
}

func TestPaymentMethodChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.create(t)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.SetStatus(ctx, tx, sub.ID, subscriptions.PastDue, subscriptions.EventPastDue, subscriptions.System)
		require.NoError(t, err)
		_, _, err = b.store.SetStatus(ctx, tx, sub.ID, subscriptions.Unpaid, subscriptions.EventUnpaid, subscriptions.System)
		return err
	})
	pm := rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_new", Last4: "1881", ExpMonth: 3, ExpYear: 2031}
	for i := 0; i < 2; i++ {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.ChangePaymentMethod(ctx, tx, sub.ID, pm, actor)
			require.Equal(t, i == 0, changed)
			require.Equal(t, subscriptions.PastDue, got.Status, "an unpaid subscription retries with the new card")
			require.Equal(t, pm, got.PaymentMethod)
			return err
		})
	}
	require.Equal(t, []string{"created", "past_due", "unpaid", "payment_method_updated"}, b.events(t, sub))
	events, err := b.store.Events(ctx, b.pool, sub.ID, 0, 100)
	require.NoError(t, err)
	last := events[len(events)-1]
	require.Equal(t, [2]subscriptions.Status{subscriptions.Unpaid, subscriptions.PastDue}, [2]subscriptions.Status{last.From, last.To})
	require.Equal(t, actor, last.Actor)
	got, err := b.store.Get(ctx, b.pool, sub.ID)
	require.NoError(t, err)
	require.Nil(t, got.UnpaidSince, "leaving unpaid clears when its dunning ended")

	// A past-due subscription's card change moves nothing.
	other := rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_other", Last4: "0005", ExpMonth: 4, ExpYear: 2031}
	b.inTx(t, func(tx pgx.Tx) error {
		got, changed, err := b.store.ChangePaymentMethod(ctx, tx, sub.ID, other, actor)
		require.True(t, changed)
		require.Equal(t, subscriptions.PastDue, got.Status)
		require.Equal(t, other, got.PaymentMethod)
		return err
	})
	events, err = b.store.Events(ctx, b.pool, sub.ID, 0, 100)
	require.NoError(t, err)
	last = events[len(events)-1]
	require.Equal(t, [2]subscriptions.Status{subscriptions.PastDue, subscriptions.PastDue}, [2]subscriptions.Status{last.From, last.To})
}

// A subscription created under an id its request derived is created under
// that id; the id taken already (the request's key created it, and its
// stored response has expired since) is ErrCreatedBefore, not a second
// subscription or an internal error.
func TestCreateUnderAGivenID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.NewSHA1(uuid.NameSpaceURL, []byte("client\x00key\x00subscription"))
	n := subscriptions.New{CustomerID: "cust-1", Amount: 49900, Currency: "RUB", Interval: period.Month, IntervalCount: 1,
		TimeZone: "Europe/Moscow", ID: id,
		PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_1", Last4: "4242", ExpMonth: 12, ExpYear: 2030}}
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(ctx, tx, n, actor, nil)
		return err
	})
	require.Equal(t, id, sub.ID)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.Create(ctx, tx, n, actor, nil)
		return err
	})
	require.ErrorIs(t, err, subscriptions.ErrCreatedBefore)
}
