package e2e_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
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

// Processes other than the dev node cannot read its books in memory:
// `rebill gatewaysim` and `rebill audit` refuse the setting by name
// rather than serve, or audit, a ledger apart from the node's.
func TestSimLedgerMemoryRefusedWhereItCannotBeRead(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REBILL_DEV": "1", "REBILL_SIM_LEDGER": "memory", "DATABASE_URL": "postgres://127.0.0.1:1/none"}
	for _, args := range [][]string{{"rebill", "gatewaysim"}, {"rebill", "audit"}} {
		var stdout, stderr lockedBuffer
		err := app.Run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
		require.ErrorContains(t, err, "REBILL_SIM_LEDGER=memory", args[1])
	}
}
