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

// A notice key written in Go is the one PostgreSQL wrote for the notices
// of before the mark: a renewal's seconds round half up there, so a
// renewal at .5 s must not get a second notice under another key.
func TestUpcomingKeyMatchesTheKeysOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	id := uuid.New()
	base := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	for _, frac := range []time.Duration{0, time.Microsecond, 499999 * time.Microsecond, 500 * time.Millisecond,
		500001 * time.Microsecond, 999999 * time.Microsecond} {
		at := base.Add(frac)
		var want string
		require.NoError(t, pool.QueryRow(ctx, `SELECT 'charge.upcoming:' || $1::uuid || ':' || extract(epoch FROM $2::timestamptz)::bigint`,
			id, at).Scan(&want))
		require.Equal(t, want, notify.UpcomingKey(id, at), "renewal at %s", at.Format(time.RFC3339Nano))
	}
}

// A renewal's notice is read once: the scan marks it in the notice's
// transaction and the index of renewals owed a notice drops it, a charge
// that moves the renewal on brings it back under a new key, a row of
// before the mark (notice published, not marked) is marked without a
// second notice, and concurrent scans publish each notice once.
func TestNoticedRenewalsAreReadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 29, 9, 0, 1, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	recorder := &notify.Recorder{}
	st.SetEventSink(recorder)
	notices := &notify.Notices{Pool: pool, Recorder: recorder, Subscriptions: st, Upcoming: 72 * time.Hour, BatchSize: 2}
	renewal := time.Date(2027, 1, 1, 9, 0, 0, 500000000, time.UTC)
	create := func(customer string) uuid.UUID {
		var sub subscriptions.Subscription
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: customer, Amount: 100, Currency: "RUB",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_" + customer)}, admin, nil)
			return err
		}))
		_, err := pool.Exec(ctx, `UPDATE subscriptions SET next_period_index = 1, next_charge_at = $2 WHERE id = $1`, sub.ID, renewal)
		require.NoError(t, err)
		return sub.ID
	}
	notices1 := func(id uuid.UUID) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND object_id = $2`,
			notify.TypeChargeUpcoming, id).Scan(&n))
		return n
	}
	owed := func() []subscriptions.Noticed {
		var due []subscriptions.Noticed
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			due, err = st.RenewalsToNotice(ctx, tx, clk.Now(), 72*time.Hour, nil, 100)
			return err
		}))
		for i := range due {
			due[i].Charge = due[i].Charge.UTC()
		}
		return due
	}

	subs := make([]uuid.UUID, 5)
	for i := range subs {
		subs[i] = create("cust-" + string(rune('a'+i)))
	}
	// The last one's notice went out before renewals were marked.
	legacy := subs[4]
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sub, err := st.Get(ctx, tx, legacy)
		if err != nil {
			return err
		}
		_, err = recorder.Record(ctx, tx, notify.TypeChargeUpcoming, legacy, nil, sub.CustomerID, nil, clk.Now(),
			notify.UpcomingKey(legacy, renewal))
		return err
	}))
	require.Len(t, owed(), 5, "all five are owed a look, the legacy one too")

	var wg sync.WaitGroup
	published := make([]int, 4)
	for i := range published {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := notices.SendNotices(ctx, clk.Now())
			assert.NoError(t, err)
			published[i] = n
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range published {
		total += n
	}
	require.Equal(t, 4, total, "four notices published in all by four concurrent scans")
	for _, id := range subs {
		require.Equal(t, 1, notices1(id), "one notice of %s", id)
	}
	require.Empty(t, owed(), "every renewal marked, the legacy one included")
	n, err := notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Zero(t, n)

	// Charged: the renewal moves on a month and is owed its notice again
	// when its lead comes.
	next := renewal.AddDate(0, 1, 0)
	_, err = pool.Exec(ctx, `UPDATE subscriptions SET next_period_index = 2, next_charge_at = $2 WHERE id = $1`, subs[0], next)
	require.NoError(t, err)
	require.Empty(t, owed(), "a month ahead: not yet")
	clk.Set(next.Add(-72*time.Hour + time.Second))
	require.Equal(t, []subscriptions.Noticed{{ID: subs[0], Charge: next}}, owed())
	n, err = notices.SendNotices(ctx, clk.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 2, notices1(subs[0]))
	require.Empty(t, owed())
}

// A renewal that moves between the scan's read and its mark is not
// marked: the mark names the renewal it announced, and the new one is
// still owed its notice.
func TestMarkLeavesARenewalThatMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 29, 9, 0, 0, 0, time.UTC))
	st := subscriptions.NewStore(clk)
	renewal := time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC)
	var sub subscriptions.Subscription
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		sub, err = st.Create(ctx, tx, subscriptions.New{CustomerID: "cust-1", Amount: 100, Currency: "RUB",
			Interval: period.Month, IntervalCount: 1, TimeZone: "UTC", PaymentMethod: card("tok_1")}, admin, nil)
		return err
	}))
	moved := renewal.Add(24 * time.Hour)
	_, err := pool.Exec(ctx, `UPDATE subscriptions SET next_period_index = 1, next_charge_at = $2 WHERE id = $1`, sub.ID, moved)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return st.MarkUpcomingNoticed(ctx, tx, []subscriptions.Noticed{{ID: sub.ID, Charge: renewal}})
	}))
	var due []subscriptions.Noticed
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		due, err = st.RenewalsToNotice(ctx, tx, clk.Now(), 96*time.Hour, nil, 10)
		return err
	}))
	require.Len(t, due, 1)
	require.Equal(t, sub.ID, due[0].ID)
	require.True(t, moved.Equal(due[0].Charge), "owed the renewal it moved to, %s", due[0].Charge)
}
