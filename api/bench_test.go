package api_test

// Benchmarks of the HTTP edge against a real PostgreSQL and real HTTP over
// loopback, with BENCHMARKS.md ("API: POST /v1/subscriptions") as their
// report:
//
//	go test -run '^$' -bench 'Benchmark(CreateSubscription|ReplaySubscription|InsertBaseline)' \
//	    -benchtime 5s -count 3 ./api/
//
// With REBILL_BENCH_TEMPLATE naming a database on the test server (one that
// `rebill-bench -history big -n 0 -db rebill_history` filled with years of
// rows), each run starts from a copy of it instead of an empty database, so
// that the same figures can be read with deep tables (BENCHMARKS.md).
//
// Each benchmark runs benchClients concurrent clients that share b.N through
// an atomic counter, times every request, and reports req/s (ops/s for the
// baseline), p50_ms and p99_ms. Any unexpected answer fails the benchmark:
// a benchmark that measures errors measures nothing.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/usecases"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
)

const (
	// benchClients is the number of concurrent clients of every benchmark.
	benchClients = 32
	// benchPoolConns is the pool size: room for every client plus slack.
	benchPoolConns = 64
	// benchReplayKeys is how many distinct keys the replay benchmark cycles.
	benchReplayKeys = 1000
	// benchCustomers spreads the created subscriptions over customers.
	benchCustomers = 1000
	// benchRunLimit bounds one run of a benchmark function, setup included:
	// go test's -timeout does not cover benchmarks.
	benchRunLimit = 5 * time.Minute
)

// benchWatchdog crashes the process with every goroutine's stack, as go
// test's -timeout does for tests, if this run outlasts benchRunLimit: a
// hung benchmark should say where it hangs rather than wait forever.
func benchWatchdog(b *testing.B) {
	b.Helper()
	name := b.Name()
	timer := time.AfterFunc(benchRunLimit, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("%s: one run took more than %v", name, benchRunLimit))
	})
	b.Cleanup(func() { timer.Stop() })
}

type benchBundle struct {
	pool   *pgxpool.Pool
	server *httptest.Server
	client *http.Client
	// customerKeys[i] is the API key of customer cust-<i>.
	customerKeys []string
	// before counts the rows of benchCounted when the run started (a copy
	// of a template has history).
	before map[string]int
}

// benchPool opens a pool of benchPoolConns connections on a fresh migrated
// database (dropped when the run ends) and opens them all before timing.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	benchWatchdog(b)
	ctx := context.Background()
	// dbtest.URL is postgres://postgres@127.0.0.1:5432/rebill_t_<hex>?sslmode=disable
	// on the local server, but TEST_DATABASE_URL may carry another query
	// string or none: set the size on the parsed config, not on the string.
	url := dbtest.URL(b)
	if template := os.Getenv("REBILL_BENCH_TEMPLATE"); template != "" {
		url = benchCopy(b, template)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatalf("parse database URL: %v", err)
	}
	cfg.MaxConns = benchPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatalf("open pool: %v", err)
	}
	b.Cleanup(pool.Close)

	conns := make([]*pgxpool.Conn, 0, benchClients+8)
	for range cap(conns) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatalf("warm pool: %v", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}

// benchCopy creates a migrated copy of template beside the test databases,
// dropped when the run ends, and returns its URL. The copy is taken file by
// file: a template with years of history is gigabytes.
func benchCopy(b *testing.B, template string) string {
	b.Helper()
	ctx := context.Background()
	server, err := pgx.ParseConfig(dbtest.ServerURL(b))
	if err != nil {
		b.Fatalf("parse server URL: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, server)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	name := "rebill_bench_api_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+pgx.Identifier{template}.Sanitize()+" STRATEGY FILE_COPY"); err != nil {
		b.Fatalf("copy %s: %v", template, err)
	}
	b.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), server)
		if err != nil {
			b.Errorf("drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("drop %s: %v", name, err)
		}
	})
	u := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", server.User, server.Host, server.Port, name)
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		b.Fatalf("open %s: %v", name, err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		b.Fatalf("migrate %s: %v", name, err)
	}
	return u
}

// benchSetup wires the server as production does (app): the
// idempotency store, River insert-only client and Renewals of setup in
// harness_test.go, plus tokens sealed in the vault, the event recorder
// (the public event log and its webhook fan-out) and velocity limits on
// customer keys, each request made with its customer's key. The creation
// limit is set far above what a run creates, so it counts every request
// and refuses none.
func benchSetup(b *testing.B) benchBundle {
	b.Helper()
	return productionWiring(b, benchPool(b), wiring{customers: benchCustomers, creations: 1 << 30})
}

// wiring varies productionWiring for the tests that count what a create
// sends.
type wiring struct {
	// customers have keys: cust-0 to cust-<customers-1>.
	customers int
	// creations is the creation limit per hour of customer keys.
	creations int
	// noVault stores tokens as they are given.
	noVault bool
}

// productionWiring is benchSetup's server on pool.
func productionWiring(b testing.TB, pool *pgxpool.Pool, w wiring) benchBundle {
	b.Helper()
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	subs := subscriptions.NewStore(clk)
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		b.Fatalf("river client: %v", err)
	}
	subs.SetEventSink(&notify.Recorder{Enqueue: insertOnly})
	keys, err := secrets.NewKeyring(testEncryptionKey)
	if err != nil {
		b.Fatalf("keyring: %v", err)
	}
	renewer := &renewals.Renewals{Pool: pool, Subscriptions: subs, Clock: clk, Charges: &charges.Store{Queue: insertOnly}, CatchUpWindow: 90 * 24 * time.Hour, BatchSize: 100}
	known := func(name string) bool { return name == "sim1" || name == "sim2" }
	uses := &usecases.Service{Pool: pool, Subscriptions: subs, Renewals: renewer, KnownGateway: known, Clock: clk,
		Owners:   charges.Owners{Subscriptions: renewals.Outcomes{Subscriptions: subs, Renewals: renewer}},
		Tokens:   &vault.Vault{Pool: pool, Keys: keys},
		Velocity: &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Creations: w.creations, velocity.PaymentMethodChanges: 1 << 30}},
	}
	if w.noVault {
		uses.Tokens = nil
	}
	apiKeys := apikeys.NewStore(pool, adminKey)
	srv := api.NewServer(api.Deps{
		Keys: apiKeys, Idempotency: idempotency.NewStore(pool, time.Minute),
		Billing: uses, Ready: pool.Ping, KnownGateway: known,
		// A real logger that formats every request line, written nowhere.
		Logger: zerolog.New(io.Discard),
	})
	ts := httptest.NewServer(srv)
	b.Cleanup(ts.Close)
	customerKeys := make([]string, w.customers)
	for i := range customerKeys {
		created, err := apiKeys.CreateWithPool(context.Background(), "customer", "cust-"+strconv.Itoa(i))
		if err != nil {
			b.Fatalf("customer key: %v", err)
		}
		customerKeys[i] = created.Secret
	}
	transport := &http.Transport{MaxIdleConns: 2 * benchPoolConns, MaxIdleConnsPerHost: benchPoolConns}
	b.Cleanup(transport.CloseIdleConnections)
	bb := benchBundle{pool: pool, server: ts, client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		customerKeys: customerKeys, before: map[string]int{}}
	for _, table := range benchCounted {
		bb.before[table] = benchCount(b, pool, "SELECT count(*) FROM "+table)
	}
	return bb
}

// benchCounted are the rows a create writes, one each; the runs check that
// every request wrote them all.
var benchCounted = []string{"subscriptions", "subscription_events", "charges",
	"river_job WHERE kind = 'charge_authorize'", "idempotency_keys WHERE status = 'completed'"}

// benchBody is a create request like createBody in harness_test.go, for
// one of benchCustomers customers. The anchor is left out: the first
// period is due now, so each create also inserts its charge and River job.
func benchBody(i int) []byte {
	return []byte(`{"customer_id":"cust-` + strconv.Itoa(i%benchCustomers) + `","amount":49900,"currency":"RUB",` +
		`"interval":"month","timezone":"Europe/Moscow","payment_method":{"gateway":"sim1","token":"tok_ok_visa",` +
		`"brand":"visa","last4":"4242","exp_month":12,"exp_year":2030},"description":"Gym, monthly","metadata":{"k":"v"}}`)
}

// post sends one POST /v1/subscriptions with the key of customer
// cust-<customer>, whose body it must be, and returns its status, headers
// and body.
func (bb benchBundle) post(ctx context.Context, customer int, idemKey string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bb.server.URL+"/v1/subscriptions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+bb.customerKeys[customer])
	req.Header.Set("Idempotency-Key", idemKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := bb.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, data, err
}

// runClients runs op for i in [0, n) on benchClients goroutines that share
// the range through an atomic counter, times each call, and reports
// throughput and latency percentiles. The benchmark timer covers exactly
// this phase. The first error stops every client and fails the benchmark.
func runClients(b *testing.B, n int, rateUnit string, op func(ctx context.Context, i int) error) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		next      atomic.Int64
		latencies = make([]time.Duration, n)
		firstErr  error
		errOnce   sync.Once
		wg        sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, i)
				latencies[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("op %d: %w", i, err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(n)/elapsed.Seconds(), rateUnit)
	b.ReportMetric(ms(percentile(latencies, 50)), "p50_ms")
	b.ReportMetric(ms(percentile(latencies, 99)), "p99_ms")
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (len(sorted)*p + 99) / 100 // ceil(n*p/100), 1-based
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func benchCount(b testing.TB, pool *pgxpool.Pool, query string) int {
	b.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		b.Fatalf("%s: %v", query, err)
	}
	return n
}

// warmUp sends a few creates from every client so that HTTP connections are
// open and pgx has prepared the statements on the pool's connections before
// the timer starts. Returns how many subscriptions it created.
func warmUp(b *testing.B, bb benchBundle) int {
	b.Helper()
	const perClient = 4
	var wg sync.WaitGroup
	errs := make(chan error, benchClients)
	for c := range benchClients {
		wg.Go(func() {
			for j := range perClient {
				status, _, body, err := bb.post(context.Background(), c, fmt.Sprintf("warm-%d-%d", c, j), benchBody(c))
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("warm-up create: status %d: %s", status, body)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return benchClients * perClient
}

// BenchmarkCreateSubscription: POST /v1/subscriptions, a fresh
// Idempotency-Key per request, due now, so each request claims the key,
// inserts the subscription, its created event, its first charge and that
// charge's River job, and stores the response, in one transaction.
func BenchmarkCreateSubscription(b *testing.B) {
	bb := benchSetup(b)
	warm := warmUp(b, bb)
	bodies := make([][]byte, benchCustomers)
	for i := range bodies {
		bodies[i] = benchBody(i)
	}
	runID := uuid.NewString()[:8] // keys unique even if a database were reused

	runClients(b, b.N, "req/s", func(ctx context.Context, i int) error {
		status, header, body, err := bb.post(ctx, i%benchCustomers, "bench-"+runID+"-"+strconv.Itoa(i), bodies[i%benchCustomers])
		if err != nil {
			return err
		}
		if status != http.StatusCreated {
			return fmt.Errorf("status %d, want 201: %s", status, body)
		}
		if header.Get(idempotency.ReplayedHeader) != "" {
			return fmt.Errorf("a first request was answered as a replay")
		}
		return nil
	})

	// Every request did the whole create path, not just part of it.
	want := b.N + warm
	for _, table := range benchCounted {
		if got := benchCount(b, bb.pool, "SELECT count(*) FROM "+table) - bb.before[table]; got != want {
			b.Fatalf("%s: %d rows, want %d", table, got, want)
		}
	}
}

// BenchmarkReplaySubscription: benchReplayKeys creates are made once
// (untimed), then replayed with the same key and body; every answer must
// be the stored 201 byte for byte, with Idempotent-Replayed: true, and no
// new subscription may appear.
func BenchmarkReplaySubscription(b *testing.B) {
	bb := benchSetup(b)
	warm := warmUp(b, bb)
	type seeded struct {
		key      string
		body     []byte
		response []byte
	}
	seeds := make([]seeded, benchReplayKeys)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, benchClients)
	)
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(seeds) {
					return
				}
				s := seeded{key: "replay-" + strconv.Itoa(i), body: benchBody(i)}
				status, _, body, err := bb.post(context.Background(), i%benchCustomers, s.key, s.body)
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("seed create: status %d: %s", status, body)
				}
				if err != nil {
					errs <- err
					return
				}
				s.response = body
				seeds[i] = s
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}

	runClients(b, b.N, "req/s", func(ctx context.Context, i int) error {
		s := seeds[i%len(seeds)]
		status, header, body, err := bb.post(ctx, (i%len(seeds))%benchCustomers, s.key, s.body)
		if err != nil {
			return err
		}
		if status != http.StatusOK && status != http.StatusCreated {
			return fmt.Errorf("replay of %s: status %d, want the stored 201: %s", s.key, status, body)
		}
		if header.Get(idempotency.ReplayedHeader) != "true" {
			return fmt.Errorf("replay of %s: no %s: true header (status %d)", s.key, idempotency.ReplayedHeader, status)
		}
		if !bytes.Equal(body, s.response) {
			return fmt.Errorf("replay of %s: body differs from the first response", s.key)
		}
		return nil
	})

	if got, want := benchCount(b, bb.pool, "SELECT count(*) FROM subscriptions")-bb.before["subscriptions"], warm+len(seeds); got != want {
		b.Fatalf("replays created subscriptions: %d rows, want %d", got, want)
	}
}

// BenchmarkInsertBaseline: what the database alone does for the simplest
// durable write: one autocommitted single-row INSERT of a uuid and the
// create body as jsonb, through the same kind of pool, from as many
// clients, with no HTTP in between.
func BenchmarkInsertBaseline(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_baseline (id uuid PRIMARY KEY, body jsonb NOT NULL)`); err != nil {
		b.Fatalf("create bench_baseline: %v", err)
	}
	bodies := make([]string, benchCustomers)
	for i := range bodies {
		bodies[i] = string(benchBody(i))
	}
	// Warm up: prepare the statement on the connections the clients use.
	for range 4 * benchClients {
		if _, err := pool.Exec(ctx, `INSERT INTO bench_baseline (id, body) VALUES ($1, $2)`, uuid.New(), bodies[0]); err != nil {
			b.Fatalf("warm-up insert: %v", err)
		}
	}
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			_, _ = pool.Exec(ctx, `INSERT INTO bench_baseline (id, body) VALUES ($1, $2)`, uuid.New(), bodies[0])
		})
	}
	wg.Wait()

	runClients(b, b.N, "ops/s", func(ctx context.Context, i int) error {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		tag, err := pool.Exec(ctx, `INSERT INTO bench_baseline (id, body) VALUES ($1, $2)`, id, bodies[i%benchCustomers])
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("inserted %d rows", tag.RowsAffected())
		}
		return nil
	})
}
