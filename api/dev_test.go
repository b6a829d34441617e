package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
)

// noGateways stands in for the simulated gateways: these tests are about
// who may call the dev endpoints, not about what the simulator does.
type noGateways struct{}

func (noGateways) Ledger(context.Context, string) ([]sim.LedgerEntry, error) { return nil, nil }
func (noGateways) SetFaults(context.Context, string, sim.FaultsPatch) (sim.Faults, error) {
	return sim.Faults{}, nil
}

var devStart = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// devSetup is setup in dev mode: a manual clock in the test's database.
func devSetup(t *testing.T) testBundle {
	t.Helper()
	return setup(t, setupOpts{lease: time.Minute, dev: func(t *testing.T, pool *pgxpool.Pool) *api.Dev {
		manual, err := clock.NewManual(context.Background(), pool, devStart)
		require.NoError(t, err)
		return &api.Dev{Clock: manual, Gateways: noGateways{}}
	}})
}

func (b testBundle) devNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT now FROM dev_clock`).Scan(&now))
	return now.UTC()
}

// The dev endpoints act on what every client shares (the clock, the
// simulated gateways, every customer's ledger entries): customer keys may
// read the time, nothing more.
func TestDevEndpointsAreForStaff(t *testing.T) {
	t.Parallel()
	b := devSetup(t)
	customer := b.newKey(t, "customer", "alice")
	support := b.newKey(t, "support", "")

	type call struct{ method, path, body string }
	staffOnly := []call{
		{http.MethodPost, "/v1/dev/clock", `{"advance":"1h"}`},
		{http.MethodGet, "/v1/dev/gateways/sim1/ledger", ""},
		{http.MethodPost, "/v1/dev/gateways/sim1/faults", `{"down":true}`},
	}
	for _, c := range staffOnly {
		res := b.do(t, c.method, c.path, customer, "cust-"+c.path, c.body)
		require.Equal(t, http.StatusForbidden, res.status, c.method+" "+c.path+": "+string(res.body))
	}
	require.Equal(t, devStart, b.devNow(t), "a customer did not move the clock")
	for i, c := range staffOnly {
		for _, key := range []string{support, adminKey} {
			res := b.do(t, c.method, c.path, key, "staff-"+c.path+key[:4]+string(rune('a'+i)), c.body)
			require.Equal(t, http.StatusOK, res.status, c.method+" "+c.path+": "+string(res.body))
		}
	}
	require.Equal(t, devStart.Add(2*time.Hour), b.devNow(t), "support and admin moved it")
	require.Zero(t, b.count(t, "idempotency_keys WHERE principal LIKE 'customer:%'"), "refusals are not stored")

	for _, key := range []string{customer, support, adminKey} {
		res := b.do(t, http.MethodGet, "/v1/dev/clock", key, "", "")
		require.Equal(t, http.StatusOK, res.status, "any role reads the time")
		require.Equal(t, "2026-12-01T11:00:00Z", res.json(t)["now"])
	}
}

// devSetupWithMoves is devSetup with the given lease and pool (nil: the
// default), whose ClockMoved records the dev clock as a fresh connection
// reads it.
func devSetupWithMoves(t *testing.T, lease time.Duration, pool *pgxpool.Pool) (testBundle, func() []time.Time) {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []time.Time
	)
	b := setup(t, setupOpts{lease: lease, pool: pool, dev: func(t *testing.T, pool *pgxpool.Pool) *api.Dev {
		manual, err := clock.NewManual(context.Background(), pool, devStart)
		require.NoError(t, err)
		return &api.Dev{Clock: manual, Gateways: noGateways{}, ClockMoved: func(ctx context.Context) {
			var now time.Time
			if err := pool.QueryRow(ctx, `SELECT now FROM dev_clock`).Scan(&now); err != nil {
				panic(err)
			}
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, now.UTC())
		}}
	}})
	return b, func() []time.Time { mu.Lock(); defer mu.Unlock(); return append([]time.Time(nil), seen...) }
}

// One Idempotency-Key moves the clock once. Here the first request is held
// on the clock, longer than the lease a former-protocol reservation had: a
// retry meanwhile is refused at once (409) without running, a retry after
// the commit replays, and the scan trigger runs once, after the commit.
func TestClockMoveOncePerIdempotencyKey(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	// Room for every connection the requests hold at once (the held row,
	// two requests, the test's own queries), so that nothing here waits
	// for a connection instead of on the clock.
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b, moves := devSetupWithMoves(t, lease, pool)
	ctx := context.Background()

	// Hold the clock's row so that the first request waits on it
	// mid-execution.
	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }() // the request must end even if the test fails
	_, err = hold.Exec(ctx, `SELECT now FROM dev_clock FOR UPDATE`)
	require.NoError(t, err)

	send := func() response {
		return b.do(t, http.MethodPost, "/v1/dev/clock", adminKey, "move-once", `{"advance":"1h"}`)
	}
	results := make(chan response, 1)
	go func() { results <- send() }()
	require.Eventually(t, func() bool {
		var waiters int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiters)
		return err == nil && waiters == 1
	}, 10*time.Second, 10*time.Millisecond, "the first request waits on the clock")
	time.Sleep(2 * lease)
	retry := send()
	require.Equal(t, http.StatusConflict, retry.status, string(retry.body))
	require.Equal(t, "1", retry.header.Get("Retry-After"))
	require.NoError(t, hold.Rollback(ctx))

	first := <-results
	require.Equal(t, http.StatusOK, first.status, string(first.body))
	again := send()
	require.Equal(t, http.StatusOK, again.status, string(again.body))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body, "one result, replayed")
	require.Equal(t, devStart.Add(time.Hour), b.devNow(t), "moved once")
	require.Equal(t, []time.Time{devStart.Add(time.Hour)}, moves(), "one scan, after the commit")
}

// A move beyond ten years is refused like any bad field.
func TestClockMoveHorizon(t *testing.T) {
	t.Parallel()
	b, moves := devSetupWithMoves(t, time.Minute, nil)
	for body, field := range map[string]string{
		`{"advance":"87673h"}`:                          "advance", // ten years and an hour
		`{"now":"2036-12-01T09:00:01Z"}`:                "now",
		`{"now":"9999-12-31T23:59:59Z"}`:                "now",
		`{"now":"2026-12-01T08:59:59Z"}`:                "now", // backwards
		`{"advance":"-1h"}`:                             "advance",
		`{"advance":"1h","now":"2027-01-01T00:00:00Z"}`: "",
	} {
		res := b.do(t, http.MethodPost, "/v1/dev/clock", adminKey, "far-"+body, body)
		require.Equal(t, http.StatusBadRequest, res.status, body+": "+string(res.body))
		require.Equal(t, field, res.json(t)["errors"].([]any)[0].(map[string]any)["field"], body)
	}
	require.Equal(t, devStart, b.devNow(t))
	require.Empty(t, moves())
	require.Zero(t, b.count(t, "idempotency_keys"))

	res := b.do(t, http.MethodPost, "/v1/dev/clock", adminKey, "ten-years", `{"now":"2036-12-01T09:00:00Z"}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "2036-12-01T09:00:00Z", res.json(t)["now"])
	require.Equal(t, []time.Time{time.Date(2036, 12, 1, 9, 0, 0, 0, time.UTC)}, moves())
}
