package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// The hot path's first two moves (scheduled -> authorizing, the hold with
// its capture's "about to call" -> capturing) change no indexed column,
// so PostgreSQL makes them HOT updates; the last (-> succeeded) leaves the
// in-flight index and cannot be. The charge is created and moved through
// a pool of its own, closed before the counts are read: a backend sends
// its table statistics when it exits, so the counts are exact and no
// other write of the test is among them.
func TestHotPathMovesAreHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	hot, err := pgxpool.New(ctx, b.pool.Config().ConnString())
	require.NoError(t, err)
	defer hot.Close()
	b.pipeline.Pool = hot
	b.pipeline.CaptureInline = true
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil)

	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, hot, func(tx pgx.Tx) error {
		created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: periodKey, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard}}, b.clock.Now())
		return err
	}))
	require.Len(t, created, 1)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err = w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: created[0].ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, created[0].ID).Status)
	hot.Close()

	var updates, hotUpdates int64
	require.Eventually(t, func() bool {
		_, err := b.pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		require.NoError(t, err)
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'charges'`).
			Scan(&updates, &hotUpdates))
		return updates >= 3
	}, 15*time.Second, 50*time.Millisecond, "the three moves' statistics")
	require.Equal(t, int64(3), updates, "three moves: authorizing, capturing, succeeded")
	require.Equal(t, int64(2), hotUpdates, "the first two moves are HOT")
}
