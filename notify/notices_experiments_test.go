package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// A subscription recorded in a notice_lead_time arm gets charge.upcoming at
// its arm's lead (a week), one in control or in no experiment at the
// default's (72h); once the experiment stops, the arm's subscriptions are
// back on the default lead.
func TestNoticeLeadFollowsTheArm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	recorder := &notify.Recorder{}
	st.SetEventSink(recorder)
	set, err := experiments.Parse([]byte(`
- key: early-notice
  policy: notice_lead_time
  start: 2026-01-01T00:00:00Z
  stop: 2027-02-01T00:00:00Z
  arms:
    - {name: control, weight: 1}
    - {name: week, weight: 1, upcoming: 7d}
`), experiments.Limits{DunningMax: 720 * time.Hour, MaxAttempts: 15})
	require.NoError(t, err)
	notices := &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: st, Upcoming: 72 * time.Hour, BatchSize: 10, Experiments: set}
	create := func(renewal time.Time, record string) uuid.UUID {
		var sub subscriptions.Subscription
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1")}, admin, nil)
			return err
		}))
		_, err := pool.Exec(ctx, `UPDATE subscriptions SET next_period_index = 1, next_charge_at = $2, experiments = $3::jsonb
			WHERE id = $1`, sub.ID, renewal, record)
		require.NoError(t, err)
		return sub.ID
	}
	count := func(id uuid.UUID) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND object_id = $2`,
			notify.TypeChargeUpcoming, id).Scan(&n))
		return n
	}
	renewal := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	week := create(renewal, `{"early-notice": "week"}`)
	control := create(renewal, `{"early-notice": "control"}`)
	none := create(renewal, `{}`)
	removed := create(renewal, `{"early-notice": "fortnight"}`)

	clk.Set(renewal.Add(-7*24*time.Hour - time.Minute))
	_, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Zero(t, count(week), "a minute before the arm's lead")

	clk.Set(renewal.Add(-7 * 24 * time.Hour))
	_, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Equal(t, 1, count(week), "the week arm's notice, at a week")
	require.Zero(t, count(control)+count(none)+count(removed), "the default lead is 72h")

	clk.Set(renewal.Add(-72 * time.Hour))
	_, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 1, 1}, []int{count(week), count(control), count(none), count(removed)})

	// After the stop, the week arm's next renewal is noticed at 72h.
	next := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	_, err = pool.Exec(ctx, `UPDATE subscriptions SET next_charge_at = $2 WHERE id = $1`, week, next)
	require.NoError(t, err)
	clk.Set(next.Add(-7 * 24 * time.Hour))
	_, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Equal(t, 1, count(week), "the experiment stopped: no notice a week ahead")
	clk.Set(next.Add(-72 * time.Hour))
	_, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Equal(t, 2, count(week))
}
