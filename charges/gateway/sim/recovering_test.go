package sim_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// recoveryStart is where the recovering-token tests start the clock: far
// from real time, so that only the sim's clock can make a card recover.
var recoveryStart = time.Date(2031, 3, 10, 8, 0, 0, 0, time.UTC)

// simOn is a sim server on clk, its books in PostgreSQL on pool or, with
// pool nil, in memory; it returns the server's root URL.
func simOn(t *testing.T, pool *pgxpool.Pool, clk clock.Clock) string {
	t.Helper()
	ctx := context.Background()
	var root string
	var stop func(context.Context) error
	var err error
	if pool == nil {
		root, stop, err = sim.StartInMemoryOnClock(ctx, clk, []string{"sim1", "sim2"}, zerolog.Nop())
	} else {
		root, stop, err = sim.StartOnClock(ctx, pool, clk, []string{"sim1", "sim2"}, zerolog.Nop())
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	return root
}

func ledgerOf(t *testing.T, root, gw string) []sim.LedgerEntry {
	t.Helper()
	resp, err := http.Get(root + "/" + gw + "/ledger")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct{ Data []sim.LedgerEntry }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return body.Data
}

// outcome is what the ledger keeps of an authorize.
type outcome struct {
	key    string
	status gateway.Status
	code   string
	at     time.Time
}

func outcomes(t *testing.T, root, gw string) []outcome {
	t.Helper()
	var out []outcome
	for _, e := range ledgerOf(t, root, gw) {
		if e.Op == gateway.OpAuthorize {
			out = append(out, outcome{e.IdempotencyKey, e.Status, e.DeclineCode, e.At})
		}
	}
	return out
}

func declinedAt(key string, at time.Time) outcome {
	return outcome{key, gateway.StatusDeclined, "insufficient_funds", at}
}

func approvedAt(key string, at time.Time) outcome {
	return outcome{key, gateway.StatusSucceeded, "", at}
}

// authorizeOn authorizes token under key and requires an answer, not an
// error: declines are results.
func authorizeOn(t *testing.T, c *sim.Client, key, token string) gateway.Result {
	t.Helper()
	res, err := c.Authorize(context.Background(), authorizeReq(key, token, 2500))
	require.NoError(t, err)
	requireNoToken(t, fmt.Sprint(res))
	return res
}

// A recovering card is declined, soft and for insufficient funds, until
// its delay has passed since its first attempt at the gateway, by the
// operations' clock, then approved and captured like tok_ok. Each full
// token, and each gateway, counts from its own first attempt; a replay is
// no attempt and keeps its answer. PostgreSQL and the in-memory books
// agree.
func TestRecoveringTokenDeclinesUntilItsDelayHasPassed(t *testing.T) {
	t.Parallel()
	books := map[string]func(t *testing.T) *pgxpool.Pool{
		"postgres": func(t *testing.T) *pgxpool.Pool {
			pool := dbtest.Pool(t)
			require.NoError(t, sim.Migrate(context.Background(), pool))
			return pool
		},
		"memory": func(*testing.T) *pgxpool.Pool { return nil },
	}
	for name, poolOf := range books {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := testsupport.NewClock(recoveryStart)
			root := simOn(t, poolOf(t), clk)
			sim1 := sim.NewClient("sim1", root+"/sim1", sim.ClientOptions{})
			sim2 := sim.NewClient("sim2", root+"/sim2", sim.ClientOptions{})
			const cust1, cust2 = "tok_funds_after_3d_cust1_secret", "tok_funds_after_3d_cust2_secret"
			const hourly = "tok_funds_after_2h_secret"
			t0 := recoveryStart
			day := 24 * time.Hour

			res := authorizeOn(t, sim1, "c1a1", cust1)
			require.Equal(t, gateway.StatusDeclined, res.Status)
			require.Equal(t, "insufficient_funds", res.DeclineCode)
			require.False(t, res.Hard, "a soft decline, as tok_decline_funds")
			authorizeOn(t, sim1, "h1", hourly)

			clk.Set(t0.Add(time.Hour))
			authorizeOn(t, sim1, "h2", hourly)
			clk.Set(t0.Add(2 * time.Hour))
			authorizeOn(t, sim1, "h3", hourly)

			clk.Set(t0.Add(day))
			authorizeOn(t, sim1, "c1a2", cust1)
			authorizeOn(t, sim1, "c2a1", cust2) // cust2's first attempt

			clk.Set(t0.Add(3*day - time.Microsecond))
			authorizeOn(t, sim1, "c1a3", cust1)

			clk.Set(t0.Add(3 * day))
			hold := authorizeOn(t, sim1, "c1a4", cust1)
			capture, err := sim1.Capture(context.Background(), settleReq("c1a4c", hold))
			require.NoError(t, err)
			require.Equal(t, gateway.StatusSucceeded, capture.Status)
			again := authorizeOn(t, sim1, "c1a1", cust1)
			require.Equal(t, gateway.StatusDeclined, again.Status, "a replay keeps its first answer")
			authorizeOn(t, sim1, "c2a2", cust2)
			authorizeOn(t, sim2, "c1a1", cust1) // cust1's first attempt at sim2

			clk.Set(t0.Add(4 * day))
			authorizeOn(t, sim1, "c2a3", cust2)
			authorizeOn(t, sim1, "c1a5", cust1)

			require.Equal(t, []outcome{
				declinedAt("c1a1", t0),
				declinedAt("h1", t0),
				declinedAt("h2", t0.Add(time.Hour)),
				approvedAt("h3", t0.Add(2*time.Hour)),
				declinedAt("c1a2", t0.Add(day)),
				declinedAt("c2a1", t0.Add(day)),
				declinedAt("c1a3", t0.Add(3*day-time.Microsecond)),
				approvedAt("c1a4", t0.Add(3*day)),
				declinedAt("c2a2", t0.Add(3*day)),
				approvedAt("c2a3", t0.Add(4*day)),
				approvedAt("c1a5", t0.Add(4*day)),
			}, outcomes(t, root, "sim1"))
			require.Equal(t, []outcome{declinedAt("c1a1", t0.Add(3*day))}, outcomes(t, root, "sim2"))
			var captures []string
			for _, e := range ledgerOf(t, root, "sim1") {
				require.Equal(t, "cret", e.TokenLast4)
				if e.Op == gateway.OpCapture {
					captures = append(captures, e.IdempotencyKey+" "+string(e.Status))
				}
			}
			require.Equal(t, []string{"c1a4c succeeded"}, captures)
		})
	}
}

// The first attempt's time lives in the database: a sim started anew, or
// another sim on the same database, counts from it, and a second start
// of the clock does not start the delay again.
func TestRecoveringTokenFirstAttemptOutlivesTheSim(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	const token = "tok_funds_after_2d_secret"
	t0 := recoveryStart

	first := simOn(t, pool, testsupport.NewClock(t0))
	res := authorizeOn(t, sim.NewClient("sim1", first+"/sim1", sim.ClientOptions{}), "k1", token)
	require.Equal(t, gateway.StatusDeclined, res.Status)

	// Another node, a day later on its clock, while the first still runs.
	other := simOn(t, pool, testsupport.NewClock(t0.Add(24*time.Hour)))
	res = authorizeOn(t, sim.NewClient("sim1", other+"/sim1", sim.ClientOptions{}), "k2", token)
	require.Equal(t, gateway.StatusDeclined, res.Status)

	// A new store on the same database, at the delay's end.
	restarted := simOn(t, pool, testsupport.NewClock(t0.Add(48*time.Hour)))
	res = authorizeOn(t, sim.NewClient("sim1", restarted+"/sim1", sim.ClientOptions{}), "k3", token)
	require.Equal(t, gateway.StatusSucceeded, res.Status)

	entries, err := sim.NewStore(pool).Ledger(ctx, "sim1")
	require.NoError(t, err)
	require.Len(t, entries, 3)
	require.Equal(t, []gateway.Status{gateway.StatusDeclined, gateway.StatusDeclined, gateway.StatusSucceeded},
		[]gateway.Status{entries[0].Status, entries[1].Status, entries[2].Status})
	requireTokenNotStored(t, pool, token)
}

// requireTokenNotStored checks that the books keep the token's hash and
// last four characters, never the token.
func requireTokenNotStored(t *testing.T, pool *pgxpool.Pool, token string) {
	t.Helper()
	ctx := context.Background()
	var leaks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM gatewaysim.operations o WHERE o::text LIKE '%secret%') +
		(SELECT count(*) FROM gatewaysim.token_first_seen f WHERE f::text LIKE '%secret%')`).Scan(&leaks))
	require.Zero(t, leaks)
	hash := sha256.Sum256([]byte(token))
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM gatewaysim.token_first_seen
		WHERE gateway = 'sim1' AND token_sha256 = $1`, hash[:]).Scan(&rows))
	require.Equal(t, 1, rows)
}

// Concurrent first attempts, through two sims whose clocks differ, settle
// on one first attempt: every one of them is declined, and the card
// recovers exactly its delay after the time they agreed on, whichever
// sim asks.
func TestRecoveringTokenConcurrentFirstAttemptsAgree(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	const token = "tok_funds_after_1h_secret"
	t0 := recoveryStart
	clocks := []*testsupport.Clock{testsupport.NewClock(t0), testsupport.NewClock(t0.Add(30 * time.Minute))}
	clients := make([]*sim.Client, len(clocks))
	for i, clk := range clocks {
		clients[i] = sim.NewClient("sim1", simOn(t, pool, clk)+"/sim1", sim.ClientOptions{})
	}

	results := make([]gateway.Result, 20)
	errs := make([]error, len(results))
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = clients[i%2].Authorize(ctx, authorizeReq(fmt.Sprintf("k%d", i), token, 100))
		})
	}
	wg.Wait()
	for i := range results {
		require.NoError(t, errs[i])
		require.Equal(t, gateway.StatusDeclined, results[i].Status, "attempt %d", i)
	}

	var firsts []time.Time
	rows, err := pool.Query(ctx, `SELECT first_at FROM gatewaysim.token_first_seen`)
	require.NoError(t, err)
	for rows.Next() {
		var at time.Time
		require.NoError(t, rows.Scan(&at))
		firsts = append(firsts, at.UTC())
	}
	require.NoError(t, rows.Err())
	require.Len(t, firsts, 1, "one first attempt")
	first := firsts[0]
	require.Contains(t, []time.Time{t0, t0.Add(30 * time.Minute)}, first, "the time of one of the attempts")

	for i, clk := range clocks {
		clk.Set(first.Add(time.Hour - time.Microsecond))
		res := authorizeOn(t, clients[i], fmt.Sprintf("early%d", i), token)
		require.Equal(t, gateway.StatusDeclined, res.Status, "sim %d just before the delay's end", i)
		clk.Set(first.Add(time.Hour))
		res = authorizeOn(t, clients[i], fmt.Sprintf("due%d", i), token)
		require.Equal(t, gateway.StatusSucceeded, res.Status, "sim %d at the delay's end", i)
	}
	entries, err := sim.NewStore(pool).Ledger(ctx, "sim1")
	require.NoError(t, err)
	require.Len(t, entries, len(results)+4)
	requireTokenNotStored(t, pool, token)
}

// Only counts in range, written plainly, in days or hours, and then
// nothing or "_" and anything, make a recovering card; any other
// tok_funds_after_ token is refused like every unknown token, and is not
// remembered.
func TestRecoveringTokenSpelling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	valid := []string{
		"tok_funds_after_1d", "tok_funds_after_30d", "tok_funds_after_1h", "tok_funds_after_720h",
		"tok_funds_after_3d_", "tok_funds_after_3d_cust_1",
	}
	invalid := []string{
		"tok_funds_after_0d", "tok_funds_after_31d", "tok_funds_after_xd", "tok_funds_after_0h",
		"tok_funds_after_721h", "tok_funds_after_03d", "tok_funds_after_3", "tok_funds_after_3w",
		"tok_funds_after_3dx", "tok_funds_after_3d-1", "tok_funds_after_d", "tok_funds_after_",
		"tok_funds_after_1000d", "tok_funds_after_99999999999999999999d", "tok_funds_after3d",
	}
	for i, token := range valid {
		res := authorizeOn(t, c, fmt.Sprintf("valid%d", i), token)
		require.Equal(t, gateway.StatusDeclined, res.Status, token)
		require.Equal(t, "insufficient_funds", res.DeclineCode, token)
	}
	for i, token := range invalid {
		res := authorizeOn(t, c, fmt.Sprintf("invalid%d", i), token)
		require.Equal(t, gateway.StatusFailed, res.Status, token)
		require.Equal(t, "invalid_token", res.DeclineCode, token)
	}
	entries := b.ledger(t, "sim1")
	require.Len(t, entries, len(valid)+len(invalid))
	for i, e := range entries {
		want := gateway.StatusDeclined
		if i >= len(valid) {
			want = gateway.StatusFailed
		}
		require.Equal(t, want, e.Status, e.IdempotencyKey)
	}
	var seen int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM gatewaysim.token_first_seen`).Scan(&seen))
	require.Equal(t, len(valid), seen, "invalid tokens are not remembered")
}
