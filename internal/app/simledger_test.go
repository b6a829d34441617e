package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/internal/dbtest"
)

// A dev node with REBILL_SIM_LEDGER=memory charges through simulators
// whose books live in its memory: the charge succeeds, the dev endpoints
// read and set those books, and the simulator's tables in the database
// (there from an earlier node with the PostgreSQL ledger) stay empty.
func TestDevNodeMemorySimLedgerLeavesPostgresLedgerEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	require.NoError(t, sim.Migrate(ctx, pool))
	b := testBundle{pool: pool, nodes: []*node{startNode(t, pool, map[string]string{"REBILL_SIM_LEDGER": "memory"})}}

	b.call(t, http.MethodPost, "/v1/dev/gateways/sim2/faults", map[string]any{"latency_ms": 1})
	sub := b.createSubscription(t, "tok_ok_memory", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1},
		opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string)), "the dev endpoint reads the books in memory")

	for _, table := range []string{"operations", "call_counters", "faults", "token_first_seen"} {
		var rows int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM gatewaysim.`+table).Scan(&rows))
		require.Zero(t, rows, "gatewaysim.%s", table)
	}
}
