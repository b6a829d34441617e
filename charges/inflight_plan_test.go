package charges_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// A benchmark polls AnyInFlight every quarter second while a million
// charges settle. The poll must read the partial index of open charges
// even when the table's statistics, gathered while every charge was open,
// say an open one is on the first heap page: the heap from its start
// holds every charge settled since.
func TestAnyInFlightReadsTheOpenChargesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const copies = 20_000
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		created, err := b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: periodKey, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard}}, b.clock.Now())
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO charges SELECT (jsonb_populate_record(c, jsonb_build_object(
				'id', gen_random_uuid(), 'period_key', c.period_key || '-' || g))).*
			FROM charges c, generate_series(1, $2) g WHERE c.id = $1`, created[0].ID, copies)
		return err
	}))
	_, err := b.pool.Exec(ctx, `ANALYZE charges`)
	require.NoError(t, err)
	// All but the newest copy settle; the statistics still say all are open.
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded'
		WHERE period_key <> $1 || '-' || $2::int`, periodKey, copies)
	require.NoError(t, err)

	// A poll before the one measured: the first to pass the settled
	// charges' index entries marks them dead, as the benchmark's earlier
	// polls do.
	open, err := charges.AnyInFlight(ctx, b.pool)
	require.NoError(t, err)
	require.True(t, open, "the newest copy is open")

	var raw []byte
	require.NoError(t, b.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+charges.AnyInFlightSQL).Scan(&raw))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	indexes, buffers := plans[0].Plan.indexes(), plans[0].Plan.SharedHit+plans[0].Plan.SharedRead
	require.Equal(t, []string{"charges_in_flight_idx"}, indexes, "the poll's plan: %s", raw)
	require.Less(t, buffers, int64(50), "buffers one poll reads with %d charges settled: %s", copies, raw)

	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded' WHERE in_flight`)
	require.NoError(t, err)
	open, err = charges.AnyInFlight(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, open, "every charge settled")
}

// planNode is a node of EXPLAIN's JSON plan, with what the test reads.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	IndexName  string     `json:"Index Name"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// indexes lists the indexes the plan scans, and "seq scan" for a
// sequential scan.
func (n planNode) indexes() []string {
	var out []string
	if n.IndexName != "" {
		out = append(out, n.IndexName)
	}
	if n.NodeType == "Seq Scan" {
		out = append(out, "seq scan")
	}
	for _, c := range n.Plans {
		out = append(out, c.indexes()...)
	}
	return out
}
