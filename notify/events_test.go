package notify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

var admin = subscriptions.Actor{ID: "key_1", Role: "admin"}

func card(token string) rebilltype.PaymentMethod {
	return rebilltype.PaymentMethod{Gateway: "sim1", Token: token, Brand: "visa", Last4: "4242", ExpMonth: 12, ExpYear: 2030}
}

// Each subscription transition publishes one event in its transaction;
// no-ops publish none; a card change that makes an unpaid subscription
// past due publishes one event.
func TestSubscriptionTransitionsPublishOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	st.SetEventSink(&notify.Recorder{})
	in := func(fn func(tx pgx.Tx) error) { require.NoError(t, pgx.BeginFunc(ctx, pool, fn)) }

	var sub subscriptions.Subscription
	in(func(tx pgx.Tx) (err error) {
		sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
			Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1")}, admin, nil)
		return err
	})
	step := func(fn func(tx pgx.Tx) (subscriptions.Subscription, bool, error)) {
		in(func(tx pgx.Tx) error { _, _, err := fn(tx); return err })
	}
	step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
		return st.MarkUnpaid(ctx, tx, sub.ID, clk.Now())
	})
	step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
		return st.ChangePaymentMethod(ctx, tx, sub.ID, card("tok_2"), admin)
	})
	step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
		return st.SetStatus(ctx, tx, sub.ID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
	})
	step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
		return st.SetStatus(ctx, tx, sub.ID, subscriptions.PastDue, subscriptions.EventPastDue, subscriptions.System)
	})
	step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
		return st.SetStatus(ctx, tx, sub.ID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
	})
	for range 2 {
		step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
			return st.Pause(ctx, tx, sub.ID, nil, "", admin)
		})
	}
	for range 2 {
		step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) { return st.Resume(ctx, tx, sub.ID, admin) })
	}
	for range 2 {
		step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
			return st.Cancel(ctx, tx, sub.ID, true, admin)
		})
	}
	for range 2 {
		step(func(tx pgx.Tx) (subscriptions.Subscription, bool, error) {
			return st.Cancel(ctx, tx, sub.ID, false, admin)
		})
	}

	events, err := notify.ListEvents(ctx, pool, notify.ListParams{ObjectID: sub.ID, Limit: 100})
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
		require.Equal(t, "cust-1", e.CustomerID)
		require.Equal(t, sub.ID, e.ObjectID)
	}
	require.Equal(t, []string{"subscription.cancelled", "subscription.cancel_scheduled", "subscription.resumed",
		"subscription.paused", "subscription.reactivated", "subscription.past_due", "subscription.reactivated",
		"subscription.payment_method_updated", "subscription.unpaid", "subscription.created"}, types)

	// The card change's object shows the new status and card.
	var object struct {
		Status        string `json:"status"`
		PaymentMethod struct {
			Last4 string `json:"last4"`
		} `json:"payment_method"`
	}
	require.NoError(t, json.Unmarshal(events[7].Object, &object))
	require.Equal(t, "past_due", object.Status)

	// The event's id is stable and readable; another customer's is not.
	got, err := notify.GetEvent(ctx, pool, events[0].PublicUUID(), "cust-1")
	require.NoError(t, err)
	require.Equal(t, events[0].PublicID(), got.PublicID())
	_, err = notify.GetEvent(ctx, pool, events[0].PublicUUID(), "cust-2")
	require.ErrorIs(t, err, notify.ErrNotFound)
}

// A failed transaction leaves neither the change nor its event.
func TestNoEventWithoutItsChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	st.SetEventSink(&notify.Recorder{})
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
		Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1")}, admin, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Zero(t, n)
}

// An event's public id is derived from its fact: a charge's event from
// the charge's key and attempt, not from the charge's row id, so the same
// fact published again after a restore forgot it (the charge made again
// under a new id, the same key) carries the id receivers saw; another
// attempt, another type or a later event of the same type is another id.
func TestEventPublicIDsAreTheFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	rec := &notify.Recorder{}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	sub := uuid.New()
	charge := func(attempt int) charges.Charge {
		return charges.Charge{ID: uuid.Must(uuid.NewV7()), SubscriptionID: sub, CustomerID: "cust-1", PeriodKey: "2026-12-01",
			Amount: 100, Currency: "RUB", Status: charges.Succeeded, AttemptCount: attempt}
	}
	publish := func(typ string, c charges.Charge) uuid.UUID {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return rec.ChargeChanged(ctx, tx, typ, c, at) }))
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT public_id FROM events WHERE object_id = $1 AND type = $2
			ORDER BY id DESC LIMIT 1`, c.ID, "charge."+typ).Scan(&id))
		return id
	}
	first := publish("succeeded", charge(1))
	_, err := pool.Exec(ctx, `DELETE FROM events`) // the restore
	require.NoError(t, err)
	at = at.Add(3 * time.Hour)
	again := publish("succeeded", charge(1))
	require.Equal(t, first, again, "the same fact, published again, is the same event")

	c := charge(1)
	require.NotEqual(t, first, publish("requires_review", c), "another type")
	require.NotEqual(t, first, publish("succeeded", charge(2)), "another attempt")
	later := publish("requires_review", c)
	require.NotEqual(t, first, later)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT public_id) FROM events`).Scan(&n))
	require.Equal(t, 4, n, "a later event of the same type about the same fact is another event")

	e, err := notify.GetEvent(ctx, pool, again, "")
	require.NoError(t, err)
	require.Equal(t, notify.FormatID(again), e.Body().ID, "the API and webhooks show the derived id")
}
