package notify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// An event shows its object as the transaction that wrote it leaves it: a
// later change in that transaction, with an event (a second transition) or
// without (Stored), restates it; events committed by other transactions
// keep the object as it was then.
func TestEventsShowTheObjectAsTheirTransactionLeavesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	st.SetEventSink(&notify.Recorder{})
	in := func(fn func(tx pgx.Tx) error) { require.NoError(t, pgx.BeginFunc(ctx, pool, fn)) }
	object := func(typ string) map[string]any {
		events, err := notify.ListEvents(ctx, pool, notify.ListParams{Type: typ, Limit: 10})
		require.NoError(t, err)
		require.Len(t, events, 1, typ)
		var out map[string]any
		require.NoError(t, json.Unmarshal(events[0].Object, &out))
		return out
	}

	var sub subscriptions.Subscription
	in(func(tx pgx.Tx) (err error) {
		sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
			Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1")}, admin, nil)
		return err
	})
	created := object("subscription.created")

	// Paused, then written again in the same transaction without an event:
	// the paused event shows the second write.
	clk.Advance(time.Hour)
	var final subscriptions.Subscription
	in(func(tx pgx.Tx) error {
		paused, _, err := st.Pause(ctx, tx, sub.ID, nil, "", admin)
		if err != nil {
			return err
		}
		final = paused
		final.NextChargeAt = paused.NextChargeAt.AddDate(0, 1, 0)
		final.UpdatedAt = clk.Now().Add(time.Minute)
		return st.Stored(ctx, tx, final)
	})
	require.Equal(t, final.UpdatedAt.Format(time.RFC3339Nano), object("subscription.paused")["updated_at"])
	require.Equal(t, created, object("subscription.created"), "an earlier transaction's event is left as it was")

	// Resumed and cancelled in one transaction: both events show the
	// subscription cancelled, as the transaction left it.
	clk.Advance(time.Hour)
	in(func(tx pgx.Tx) error {
		if _, _, err := st.Resume(ctx, tx, sub.ID, admin); err != nil {
			return err
		}
		_, _, err := st.Cancel(ctx, tx, sub.ID, false, admin)
		return err
	})
	require.Equal(t, "cancelled", object("subscription.resumed")["status"])
	require.Equal(t, object("subscription.cancelled"), object("subscription.resumed"))
	require.Equal(t, "paused", object("subscription.paused")["status"], "committed before: as it was then")

	// A later transaction's write without an event leaves the events
	// committed before as they were.
	paused := object("subscription.paused")
	in(func(tx pgx.Tx) error {
		stale := final
		stale.Amount = 999
		return st.Stored(ctx, tx, stale)
	})
	require.Equal(t, paused, object("subscription.paused"))
}
