package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/testkit/dbtest"
)

// Duplicates sent at once: exactly one executes; every other one is told
// the first is in flight (409) or, once it has committed, gets its answer
// replayed. One subscription, one charge, one job, one record.
func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 32
	results := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "dup", createBody)
		})
	}
	close(start)
	wg.Wait()

	var first []byte
	executed, conflicts, replays := 0, 0, 0
	for _, res := range results {
		switch {
		case res.status == http.StatusConflict:
			conflicts++
			require.Equal(t, "1", res.header.Get("Retry-After"))
			require.Contains(t, res.json(t)["type"], "idempotency-key-in-use")
		case res.status == http.StatusCreated && res.header.Get(idempotency.ReplayedHeader) == "":
			executed++
			first = res.body
		case res.status == http.StatusCreated:
			replays++
		default:
			t.Fatalf("unexpected answer %d: %s", res.status, res.body)
		}
	}
	require.Equal(t, 1, executed, "exactly one request executes")
	for _, res := range results {
		if res.header.Get(idempotency.ReplayedHeader) == "true" {
			require.Equal(t, first, res.body, "a replay is the first answer byte for byte")
		}
	}
	t.Logf("%d executed, %d answered 409, %d replayed", executed, conflicts, replays)
	require.Equal(t, 1, b.count(t, "subscriptions"))
	require.Equal(t, 1, b.count(t, "subscription_events"))
	require.Equal(t, 1, b.count(t, "charges"))
	require.Equal(t, 1, b.count(t, "river_job WHERE kind = 'charge_authorize'"))
	require.Equal(t, 1, b.count(t, "idempotency_keys WHERE status = 'completed'"))
	require.Zero(t, b.count(t, "idempotency_keys WHERE status <> 'completed'"), "no processing record is written")
}

// The race a claim cannot prevent: a duplicate's commit lands after the
// claim looked for a record and before its handler's writes commit (here
// forced by the claimed hook; in production a duplicate committing between
// the look's snapshot and its lock, or a node of the former protocol). The
// request's own writes must roll back, and its answer must be the stored
// one.
func TestDuplicateCommittedDuringExecutionIsRolledBack(t *testing.T) {
	t.Parallel()
	var (
		pool    = dbtest.Pool(t)
		hookRan atomic.Int32
	)
	b := setup(t, setupOpts{lease: time.Minute, pool: pool, claimed: func(ctx context.Context, scope, key string) {
		if key != "raced" {
			return
		}
		hookRan.Add(1)
		// A duplicate of this request completed and committed: its record
		// is the one "first" stored (same method, path and body).
		_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, fingerprint, status, locked_until,
				response_status, response_headers, response_body)
			SELECT principal, 'raced', fingerprint, status, locked_until, response_status, response_headers, response_body
			FROM idempotency_keys WHERE key = 'first'`)
		if err != nil {
			panic(err)
		}
	}})
	first := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "first", createBody)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))

	raced := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "raced", createBody)
	require.EqualValues(t, 1, hookRan.Load(), "the raced request was claimed and executed")
	require.Equal(t, http.StatusCreated, raced.status, string(raced.body))
	require.Equal(t, "true", raced.header.Get(idempotency.ReplayedHeader), "answered as a replay")
	require.Equal(t, first.body, raced.body)
	require.Equal(t, first.header.Get("Location"), raced.header.Get("Location"))

	require.Equal(t, 1, b.count(t, "subscriptions"), "the raced request's writes rolled back")
	require.Equal(t, 1, b.count(t, "subscription_events"))
	require.Equal(t, 1, b.count(t, "events"))
	require.Equal(t, 1, b.count(t, "charges"))
	require.Equal(t, 1, b.count(t, "river_job WHERE kind = 'charge_authorize'"))
	require.Equal(t, 2, b.count(t, "idempotency_keys"))

	// A key used for another request meanwhile: the race ends in 422, and
	// nothing of this request is kept either.
	other := strings.Replace(createBody, "49900", "50000", 1)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "raced", other)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, string(res.body))
	require.Equal(t, 1, b.count(t, "subscriptions"))
}

// A live lease of the former protocol's record holds the key: 409 at once,
// and nothing runs; an expired one is taken over.
func TestFormerProtocolLiveLeaseIs409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fingerprint := idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", []byte(createBody))
	b.formerReserve(t, "key:bootstrap-admin", "held", fingerprint, time.Minute)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "held", createBody)
	require.Equal(t, http.StatusConflict, res.status, string(res.body))
	require.Equal(t, "1", res.header.Get("Retry-After"))
	require.Zero(t, b.count(t, "subscriptions"))

	b.expireLease(t, "held")
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "held", createBody)
	require.Equal(t, http.StatusCreated, res.status, "an expired lease is taken over: "+string(res.body))
	require.Empty(t, res.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, 1, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "idempotency_keys WHERE status <> 'completed'"))

	// A request refused after a takeover releases the record, as that
	// protocol did, so that a corrected request executes.
	bad := strings.Replace(createBody, `"RUB"`, `"XYZ"`, 1)
	b.formerReserve(t, "key:bootstrap-admin", "refused", idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", []byte(bad)), time.Minute)
	b.expireLease(t, "refused")
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "refused", bad).status)
	require.Zero(t, b.count(t, "idempotency_keys WHERE key = 'refused'"))
	fixed := strings.Replace(createBody, "49900", "50000", 1)
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "refused", fixed)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	require.Empty(t, res.header.Get(idempotency.ReplayedHeader))
}

// stmtCounter counts what a pool sends: statements, round trips (a batch is
// one), statements that began outside a transaction (each its own commit),
// and COMMITs. One-time statement preparation is not counted.
type stmtCounter struct {
	mu                              sync.Mutex
	statements, roundTrips, commits int
	autocommitted                   []string
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTrips++
	c.statement(conn, data.SQL)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTrips++
	return ctx
}

func (c *stmtCounter) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statement(conn, data.SQL)
}

func (c *stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *stmtCounter) statement(conn *pgx.Conn, sql string) {
	c.statements++
	word := strings.ToLower(strings.Fields(sql)[0])
	switch {
	case word == "commit":
		c.commits++
	case word != "begin" && conn.PgConn().TxStatus() == 'I':
		c.autocommitted = append(c.autocommitted, strings.Join(strings.Fields(sql), " "))
	}
}

func (c *stmtCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements, c.roundTrips, c.commits, c.autocommitted = 0, 0, 0, nil
}

// A create is one transaction: one commit, the key claimed and its
// response stored inside it; nothing of the idempotency protocol commits
// on its own. The figures are logged for BENCHMARKS.md.
func TestCreateIsOneCommit(t *testing.T) {
	t.Parallel()
	counter := &stmtCounter{}
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setup(t, setupOpts{lease: time.Minute, pool: pool})
	// Warm up: the admin key's first use and every statement prepared.
	for i := range 3 {
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey,
			"warm-"+string(rune('a'+i)), createBodyFor("cust-w")).status)
	}

	counter.reset()
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "counted", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	counter.mu.Lock()
	defer counter.mu.Unlock()
	t.Logf("create: %d statements, %d round trips, %d COMMIT, autocommitted: %q",
		counter.statements, counter.roundTrips, counter.commits, counter.autocommitted)
	require.Equal(t, 1, counter.commits, "one commit")
	for _, sql := range counter.autocommitted {
		require.NotContains(t, sql, "idempotency_keys", "the idempotency protocol commits nothing on its own")
		require.True(t, strings.HasPrefix(strings.ToLower(sql), "select"), "no autocommitted write: %s", sql)
	}

	counter.statements, counter.roundTrips, counter.commits, counter.autocommitted = 0, 0, 0, nil
	counter.mu.Unlock()
	replay := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "counted", createBody)
	counter.mu.Lock()
	require.Equal(t, "true", replay.header.Get(idempotency.ReplayedHeader))
	t.Logf("replay: %d statements, %d round trips, %d COMMIT, autocommitted: %q",
		counter.statements, counter.roundTrips, counter.commits, counter.autocommitted)
	require.Zero(t, counter.commits)
}
