package notify_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// subscription.trial_will_end is published once per trial, TrialWillEnd
// before its end, by any number of scans at once and after a restart;
// late (once) after a clock jump past its time while the trial is still
// on; never for a trial cancelled, set to cancel at its end, ended early,
// or already over.
func TestTrialWillEndNoticeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	recorder := &notify.Recorder{}
	st.SetEventSink(recorder)
	newNotices := func() *notify.Notices {
		return &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: st, Upcoming: 72 * time.Hour,
			TrialWillEnd: 72 * time.Hour, BatchSize: 2}
	}
	create := func(days int) uuid.UUID {
		var sub subscriptions.Subscription
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1"), TrialPeriodDays: &days}, admin, nil)
			return err
		}))
		return sub.ID
	}
	inTx := func(fn func(tx pgx.Tx) error) { require.NoError(t, pgx.BeginFunc(ctx, pool, fn)) }
	count := func(id uuid.UUID) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND object_id = $2`,
			notify.TypeTrialWillEnd, id).Scan(&n))
		return n
	}
	send := func(n *notify.Notices) {
		_, err := n.SendNotices(ctx, clk.Now())
		require.NoError(t, err)
	}

	onTime := create(10)
	late := create(20)
	cancelled := create(10)
	cancelling := create(10)
	endedEarly := create(10)
	many := make([]uuid.UUID, 5) // more than a batch
	for i := range many {
		many[i] = create(10)
	}
	inTx(func(tx pgx.Tx) error {
		if _, _, err := st.Cancel(ctx, tx, cancelled, false, admin); err != nil {
			return err
		}
		if _, _, err := st.Cancel(ctx, tx, cancelling, true, admin); err != nil {
			return err
		}
		_, _, err := st.EndTrial(ctx, tx, endedEarly, clk.Now(), admin)
		return err
	})

	send(newNotices())
	require.Zero(t, count(onTime), "ten days ahead")

	clk.Advance(7 * 24 * time.Hour) // 72 h before the ten-day trials end
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := newNotices().SendNotices(ctx, clk.Now())
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	send(newNotices()) // a restart
	for _, id := range append([]uuid.UUID{onTime}, many...) {
		require.Equal(t, 1, count(id))
	}
	require.Zero(t, count(late))
	require.Zero(t, count(cancelled), "cancelled")
	require.Zero(t, count(cancelling), "nothing will be charged: the cancel takes effect at the trial's end")
	require.Zero(t, count(endedEarly), "the trial is over")

	// A jump past the twenty-day trial's notice time, before its end: late,
	// once; the ten-day trials are over and get no second one.
	clk.Advance(11 * 24 * time.Hour)
	send(newNotices())
	send(newNotices())
	require.Equal(t, 1, count(late))
	require.Equal(t, 1, count(onTime))

	// A trial whose end the clock passed before any scan is not told.
	jumped := create(5)
	clk.Advance(6 * 24 * time.Hour)
	send(newNotices())
	require.Zero(t, count(jumped))
}
