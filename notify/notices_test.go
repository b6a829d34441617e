package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// charge.upcoming fires once per renewal, 72h before it, late (once) after
// a clock jump past the notice time, never for a renewal that will not
// happen; payment_method.expiring once per card in its last month. Both
// survive repeated scans and a restart (a new Notices).
func TestNoticesFireOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	recorder := &notify.Recorder{}
	st.SetEventSink(recorder)
	newNotices := func() *notify.Notices {
		return &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: st, Upcoming: 72 * time.Hour, BatchSize: 2}
	}
	renewal := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	create := func(pm rebilltype.PaymentMethod, cancelAtEnd bool) uuid.UUID {
		var sub subscriptions.Subscription
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: pm}, admin, nil)
			return err
		}))
		// As if its first period had been charged: the renewal is ahead.
		_, err := pool.Exec(ctx, `UPDATE subscriptions SET next_period_index = 1, next_charge_at = $2, cancel_at_period_end = $3
			WHERE id = $1`, sub.ID, renewal, cancelAtEnd)
		require.NoError(t, err)
		return sub.ID
	}
	count := func(typ string, id uuid.UUID) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND object_id = $2`, typ, id).Scan(&n))
		return n
	}
	send := func(n *notify.Notices) {
		_, err := n.SendNotices(ctx, clk.Now())
		require.NoError(t, err)
	}

	onTime := create(card("tok_1"), false)
	late := create(card("tok_2"), false)
	cancelling := create(card("tok_3"), false)
	expiring := rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_4", ExpMonth: 12, ExpYear: 2026}
	cardEnds := create(expiring, false)
	_, err := pool.Exec(ctx, `UPDATE subscriptions SET cancel_at_period_end = true WHERE id = $1`, cancelling)
	require.NoError(t, err)

	notices := newNotices()
	send(notices)
	require.Zero(t, count(notify.TypeChargeUpcoming, onTime), "a month ahead")
	require.Zero(t, count(notify.TypePaymentMethodExpiring, cardEnds), "November")

	// The late subscription's renewal moves three weeks on (a pause and
	// resume, say) so that only onTime's notice time comes now.
	_, err = pool.Exec(ctx, `UPDATE subscriptions SET next_charge_at = $2 WHERE id = $1`, late, renewal.Add(21*24*time.Hour))
	require.NoError(t, err)
	clk.Set(renewal.Add(-72 * time.Hour))
	send(notices)
	send(notices)
	send(newNotices()) // a restart
	require.Equal(t, 1, count(notify.TypeChargeUpcoming, onTime))
	require.Zero(t, count(notify.TypeChargeUpcoming, late))
	require.Zero(t, count(notify.TypeChargeUpcoming, cancelling), "no renewal: the cancel takes effect at period end")
	require.Equal(t, 1, count(notify.TypePaymentMethodExpiring, cardEnds), "December: the card's last month")

	// A clock jump past the late one's notice time, before its renewal:
	// sent late, once.
	clk.Set(renewal.Add(20 * 24 * time.Hour))
	send(notices)
	send(newNotices())
	require.Equal(t, 1, count(notify.TypeChargeUpcoming, late))
	require.Equal(t, 1, count(notify.TypeChargeUpcoming, onTime))
	require.Equal(t, 1, count(notify.TypePaymentMethodExpiring, cardEnds), "January: expired, no second notice")
}
