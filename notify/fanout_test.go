package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// Deliveries are queued in the event's transaction: a transaction that
// dies (a kill -9 before commit) leaves neither the event nor its
// deliveries, and a committed one has one per enabled endpoint
// subscribed to the type, none for a disabled one.
func TestFanOutIsInTheEventsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	keys, err := secrets.NewKeyring(testKey)
	require.NoError(t, err)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	wh := &notify.Webhooks{Pool: pool, Keys: keys, Policy: notify.URLPolicy{AllowPrivate: true}, Clock: clk, Enqueue: insertOnly}
	recorder := &notify.Recorder{Enqueue: insertOnly}
	create := func(events ...string) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ep, _, err := wh.Create(ctx, tx, "http://127.0.0.1:9/hook", events, "")
			id = ep.ID
			return err
		}))
		return id
	}
	all := create("*")
	succeeded := create("charge.succeeded")
	create("charge.declined")
	disabled := create("*")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := wh.SetStatus(ctx, tx, disabled, notify.Disabled)
		return err
	}))
	count := func(query string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, query).Scan(&n))
		return n
	}
	publish := func(tx pgx.Tx) error {
		_, err := recorder.Record(ctx, tx, "charge.succeeded", uuid.New(), nil, "cust-1", map[string]string{}, clk.Now(), "")
		return err
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, publish(tx))
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, count(`SELECT count(*) FROM events`))
	require.Zero(t, count(`SELECT count(*) FROM river_job`))

	require.NoError(t, pgx.BeginFunc(ctx, pool, publish))
	require.Equal(t, 1, count(`SELECT count(*) FROM events`))
	rows, err := pool.Query(ctx, `SELECT (args->>'endpoint_id')::uuid FROM river_job WHERE kind = 'webhook_deliver' AND queue = 'webhooks'`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{all, succeeded}, got)
}
