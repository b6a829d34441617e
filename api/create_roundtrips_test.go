package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
)

// createRoundTrips is what the transaction of one create sends with
// production wiring, a customer key's or staff's alike: BEGIN; the
// Idempotency-Key claimed; the creation counted and the card sealed; the
// subscription, its created event and first charge; the charge's River
// job; the public event and its webhook endpoints; the response stored and
// COMMIT. A key stored in api_keys (a customer's) is read before, on its
// own.
const createRoundTrips = 7

// tracedWiring is productionWiring on a fresh database whose every
// statement counter counts, warmed up: the customers' keys used and the
// create's statements prepared on its connection.
func tracedWiring(t *testing.T, w wiring) (benchBundle, *stmtCounter) {
	t.Helper()
	counter := &stmtCounter{}
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1 // one connection: every statement is prepared once
	// pgxpool pings a connection idle for over a second before handing it
	// out: on a loaded machine that is a round trip the create never sent.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	bb := productionWiring(t, pool, w)
	for c := range w.customers {
		createdAs(t, bb, c, fmt.Sprintf("warm-%d", c), benchBody(c))
	}
	return bb, counter
}

// createdAs creates body with the key of customer cust-<customer>, or with
// the admin key for -1, and requires a 201.
func createdAs(t *testing.T, bb benchBundle, customer int, idemKey string, body []byte) {
	t.Helper()
	status, _, res, err := postAs(bb, customer, idemKey, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(res))
}

func postAs(bb benchBundle, customer int, idemKey string, body []byte) (int, http.Header, []byte, error) {
	if customer >= 0 {
		return bb.post(context.Background(), customer, idemKey, body)
	}
	admin := bb
	admin.customerKeys = []string{adminKey}
	return admin.post(context.Background(), 0, idemKey, body)
}

// withToken is body with the card token replaced.
func withToken(body []byte, token string) []byte {
	return []byte(strings.Replace(string(body), `"tok_ok_visa"`, `"`+token+`"`, 1))
}

func rows(t *testing.T, bb benchBundle, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, bb.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// The creation limit's count and the vault's seal share a round trip: a
// create with production wiring sends createRoundTrips, whether the card
// is new or known, the key a customer's (counted) or staff's (exempt),
// with or without a vault. The figures are logged for BENCHMARKS.md.
func TestCreateRoundTrips(t *testing.T) {
	t.Parallel()
	bb, counter := tracedWiring(t, wiring{customers: 1, creations: 100})
	counted := func(name string, customer int, body []byte) {
		t.Helper()
		counter.reset()
		createdAs(t, bb, customer, name, body)
		counter.mu.Lock()
		defer counter.mu.Unlock()
		t.Logf("%s: %d statements, %d round trips, %d COMMIT, autocommitted: %q", name, counter.statements,
			counter.roundTrips, counter.commits, counter.autocommitted)
		keyRead := 0
		if customer >= 0 {
			keyRead = 1
			require.Len(t, counter.autocommitted, 1, name)
			require.Contains(t, counter.autocommitted[0], "FROM api_keys", name)
		}
		require.Len(t, counter.autocommitted, keyRead, name)
		require.Equal(t, createRoundTrips, counter.roundTrips-keyRead, name)
		require.Equal(t, 1, counter.commits, name)
	}
	counted("customer, known card", 0, benchBody(0))
	counted("customer, new card", 0, withToken(benchBody(0), "tok_ok_new"))
	require.Equal(t, 3, rows(t, bb, `SELECT count FROM velocity_counters WHERE customer_id = 'cust-0' AND name = 'creations'`),
		"every create of a customer key is counted")
	counted("staff", -1, withToken(benchBody(0), "tok_ok_staff"))
	require.Equal(t, 3, rows(t, bb, `SELECT count FROM velocity_counters WHERE customer_id = 'cust-0' AND name = 'creations'`),
		"staff keys are exempt")
	require.Equal(t, 3, rows(t, bb, `SELECT count(*) FROM payment_tokens`), "one row per card")
	require.Zero(t, rows(t, bb, `SELECT count(*) FROM subscriptions WHERE pm_token NOT LIKE 'ptok_%'`), "every card sealed")

	t.Run("without a vault", func(t *testing.T) {
		t.Parallel()
		bb, counter := tracedWiring(t, wiring{customers: 1, creations: 100, noVault: true})
		counter.reset()
		createdAs(t, bb, 0, "counted", withToken(benchBody(0), "tok_ok_clear"))
		counter.mu.Lock()
		roundTrips := counter.roundTrips
		counter.mu.Unlock()
		require.Equal(t, createRoundTrips, roundTrips-1, "the key read, then the transaction")
		require.Equal(t, 2, rows(t, bb, `SELECT count FROM velocity_counters WHERE customer_id = 'cust-0'`))
		require.Equal(t, 1, rows(t, bb, `SELECT count(*) FROM subscriptions WHERE pm_token = 'tok_ok_clear'`))
		require.Zero(t, rows(t, bb, `SELECT count(*) FROM payment_tokens`))
	})
}

// Over the limit, a create whose card is new is refused with 429 and
// Retry-After, and nothing of it stays: no subscription, no count, no
// sealed card, no stored answer.
func TestCreateOverTheLimitLeavesNothing(t *testing.T) {
	t.Parallel()
	bb, _ := tracedWiring(t, wiring{customers: 1, creations: 1}) // the warm-up took the one creation
	before := map[string]int{}
	tables := []string{"subscriptions", "charges", "payment_tokens", "events", "river_job", "idempotency_keys"}
	for _, table := range tables {
		before[table] = rows(t, bb, `SELECT count(*) FROM `+table)
	}
	status, header, body, err := postAs(bb, 0, "refused", withToken(benchBody(0), "tok_ok_refused"))
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, status, string(body))
	require.Equal(t, "3600", header.Get("Retry-After"), "the end of the clock hour")
	require.Contains(t, string(body), "velocity-limit")
	for _, table := range tables {
		require.Equal(t, before[table], rows(t, bb, `SELECT count(*) FROM `+table), table)
	}
	require.Equal(t, 1, rows(t, bb, `SELECT count FROM velocity_counters WHERE customer_id = 'cust-0'`),
		"the refused create is not counted")

	status, _, body, err = postAs(bb, -1, "staff", withToken(benchBody(0), "tok_ok_refused"))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "staff keys are exempt: %s", body)
}

// Creates at once with the same new card, of several customers, seal one
// vault row, and every subscription holds its reference.
func TestConcurrentCreatesSealOneCard(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	bb := productionWiring(t, pool, wiring{customers: 4, creations: 100})
	const n = 16
	var wg sync.WaitGroup
	statuses := make([]int, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			statuses[i], _, _, _ = bb.post(context.Background(), i%4, fmt.Sprintf("same-card-%d", i),
				withToken(benchBody(i%4), "tok_ok_shared"))
		})
	}
	close(start)
	wg.Wait()
	for i, status := range statuses {
		require.Equal(t, http.StatusCreated, status, "create %d", i)
	}
	require.Equal(t, 1, rows(t, bb, `SELECT count(*) FROM payment_tokens`))
	require.Equal(t, n, rows(t, bb, `SELECT count(*) FROM subscriptions WHERE pm_token = (SELECT id FROM payment_tokens)`))
	require.Equal(t, n, rows(t, bb, `SELECT sum(count)::int FROM velocity_counters WHERE name = 'creations'`))
}
