package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/proctest"
)

var (
	longFlag   = flag.Bool("drill.long", false, "run the long drills: more subscriptions, three seeds (per replication mode for the failover drill)")
	reportFlag = flag.String("drill.report", "", "append each run's figures (one JSON line) to this file")
)

func TestMain(m *testing.M) { proctest.Main(m) }

const (
	adminKey      = "drill-admin-key-0123456789abcdefghij"
	encryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes, base64
	gatewayName   = "ext1"
)

// TestFailoverDrillShort is the drill small enough for the normal suite:
// 30 subscriptions, each replication mode once, side by side (the
// asynchronous run spends most of its time waiting for River's rescuer).
func TestFailoverDrillShort(t *testing.T) {
	for _, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			runDrill(t, drillPlan{sync: mode == "sync", subs: 30, seed: 1})
		})
	}
}

// TestFailoverDrillLong is the drill by hand (-drill.long): more
// subscriptions, three seeds per replication mode.
func TestFailoverDrillLong(t *testing.T) {
	if !*longFlag {
		t.Skip("the long failover drill runs with -drill.long (docs/testing.md)")
	}
	for _, mode := range []string{"async", "sync"} {
		for _, seed := range []int{11, 12, 13} {
			t.Run(fmt.Sprintf("%s/seed%d", mode, seed), func(t *testing.T) {
				runDrill(t, drillPlan{sync: mode == "sync", subs: 120, seed: seed})
			})
		}
	}
}

// drillPlan is one run: the replication mode, how many subscriptions are
// due at once, and the seed that varies the card mix and the moment of
// the kill.
type drillPlan struct {
	sync bool
	subs int
	seed int
}

// figures are what a run measured, for SOAK.md.
type figures struct {
	Mode           string `json:"mode"`
	Seed           int    `json:"seed"`
	Subscriptions  int    `json:"subscriptions"`
	InFlightAtKill int    `json:"charges_in_flight_at_kill"`
	CapturesAtKill int    `json:"gateway_captures_at_kill"`
	WALBytesLost   int64  `json:"wal_bytes_not_replayed"`
	ChargesLost    int    `json:"charge_rows_lost"`
	// CapturesUnknown are the gateway's captures the promoted database
	// does not hold as succeeded: those in flight at the kill, and with
	// asynchronous replication those whose commits were lost.
	CapturesUnknown int    `json:"captures_unknown_to_the_promoted_database"`
	Lookups         int64  `json:"gateway_lookups_after_kill"`
	Replays         int64  `json:"gateway_replays_after_kill"`
	Reconnected     string `json:"nodes_answering_after_promotion"`
	// Nudges are the two-minute moves of the clock the settling needed
	// for the inspector to kick charges left in flight with no live job.
	Nudges int `json:"clock_nudges"`
	// OrphanJobs are the River jobs the promoted replica held as running:
	// each waits for River's rescuer (REBILL_RESCUE_AFTER, then the
	// rescuer's round) before it runs again, a billing scan's included.
	OrphanJobs int `json:"river_jobs_running_at_promotion"`
	// SettledAfter is how long after the promotion the periods due at
	// the kill were all charged and none was in flight.
	SettledAfter    string   `json:"settled_after_promotion"`
	Reviews         int      `json:"reviews"`
	ReviewReasons   []string `json:"review_reasons,omitempty"`
	GatewayCaptures int      `json:"gateway_captures"`
	DoubleCaptures  int      `json:"double_captures"`
	RefundsAsked    int      `json:"refunds_asked_before_kill"`
	RefundsResent   int      `json:"refunds_resent_after_promotion"`
	// AuditFlaggedLostRefunds are the audit's refund_unknown_at_rebill
	// findings before the client re-sent the refunds the database lost.
	AuditFlaggedLostRefunds int `json:"audit_flagged_lost_refunds"`
	GatewayRefunds          int `json:"gateway_refunds"`
	// ChargeIDsChanged are periods whose charge the primary held under one
	// id and the promoted database, after settling, under another: the
	// charge was created again after its commit was lost.
	ChargeIDsChanged   int `json:"charge_ids_changed"`
	AuditDiscrepancies int `json:"audit_discrepancies"`
	Violations         int `json:"violations"`
	autopayFigures
}

// mirrorClock stamps the gateway's operations: the test sets it to the
// nodes' dev clock before it moves theirs, so the gateway's book keeps the
// days rebill keeps.
type mirrorClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *mirrorClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *mirrorClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// counter sits between the nodes and the gateway and counts the calls
// that matter after a failover: look-ups by key, and operations sent again
// with a key the gateway already holds.
type counter struct {
	// delay is added to every operation, so that a burst of charges is
	// still in flight when the primary dies.
	delay   time.Duration
	on      atomic.Bool
	lookups atomic.Int64
	replays atomic.Int64
	mu      sync.Mutex
	seen    map[string]bool
}

func (c *counter) wrap(target *url.URL) http.Handler {
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A call cut short by its caller's timeout is the caller's business.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		switch {
		case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/operations/"):
			if c.on.Load() {
				c.lookups.Add(1)
			}
		case r.Method == http.MethodPost && key != "":
			time.Sleep(c.delay)
			c.mu.Lock()
			again := c.seen[key]
			c.seen[key] = true
			c.mu.Unlock()
			if again && c.on.Load() {
				c.replays.Add(1)
			}
		}
		proxy.ServeHTTP(w, r)
	})
}

type drill struct {
	t        *testing.T
	ctx      context.Context
	plan     drillPlan
	primary  *pgembed.Member
	replica  *pgembed.Member
	book     *pgxpool.Pool
	clk      *mirrorClock
	env      map[string]string
	nodes    []*proctest.Process
	calls    *counter
	fig      figures
	failures []string
	refunds  []refundAsked
	// registry is the registry party fines are posted through, its book
	// outside the databases that fail.
	registry *agentfake.Fake
	enrs     []enrolment
	updates  []update
	// idsAtKill are the primary's charge ids by charge key just before
	// the kill, to count those a lost commit made rebill create anew.
	idsAtKill map[string]uuid.UUID
	promoted  time.Time
}

// refundAsked is a refund the drill's client asked for before the kill.
type refundAsked struct {
	sub    uuid.UUID
	period string
	idem   string
}

func runDrill(t *testing.T, plan drillPlan) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := &drill{t: t, ctx: ctx, plan: plan, clk: &mirrorClock{}, calls: &counter{seen: map[string]bool{}, delay: 80 * time.Millisecond}}
	d.fig.Mode, d.fig.Seed, d.fig.Subscriptions = map[bool]string{true: "sync", false: "async"}[plan.sync], plan.seed, plan.subs
	began := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), name) }
	d.startDatabases()
	d.startGateway(pgembed.MultiHostURL("rebill", d.primary, d.replica))
	d.startNodes()
	phase("primary, replica, gateway and nodes started")

	now := d.devNow()
	d.clk.set(now)
	anchor := now.Add(time.Hour)
	subs := d.createSubscriptions(anchor, 0, d.plan.subs)
	d.createEnrollments(autopayLoad(d.plan.subs))
	phase("subscriptions and enrollments created")
	// Three daily periods of every subscription fall due at once.
	d.failover(subs, anchor.Add(48*time.Hour))
	phase("failed over")
	d.repushBills()
	d.settle(subs, anchor)
	d.resendRefunds()
	d.waitAutopay()
	phase("settled")
	d.judge(subs)
	phase("judged")
	d.report()
}

func (d *drill) fatalf(format string, args ...any) {
	d.t.Helper()
	d.dumpLogs()
	d.t.Fatalf(format, args...)
}

// startDatabases starts the primary and its replica in folders the
// postgres user can reach (the tests may run as root).
func (d *drill) startDatabases() {
	dir, err := os.MkdirTemp("", "rebill-drill-")
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = proctest.FreePort(); err != nil {
			d.t.Fatal(err)
		}
	}
	d.primary, err = pgembed.StartPrimary(d.ctx, pgembed.ReplicationOptions{DataDir: filepath.Join(dir, "primary"), Port: ports[0]})
	if errors.Is(err, pgembed.ErrNoBinaries) {
		d.t.Skipf("the failover drill needs PostgreSQL's server programs (initdb, pg_ctl, postgres, pg_basebackup): %v", err)
	}
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = d.primary.Stop(context.Background()) })
	d.replica, err = d.primary.StartReplica(d.ctx, pgembed.ReplicationOptions{DataDir: filepath.Join(dir, "replica"), Port: ports[1]}, d.plan.sync)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = d.replica.Stop(context.Background()) })
	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("postgres"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close(d.ctx)
	if _, err := conn.Exec(d.ctx, `CREATE DATABASE rebill`); err != nil {
		d.t.Fatal(err)
	}
}

// startGateway runs the simulated gateway with its book in a database of
// the shared test server, outside the pair that fails, behind the
// counting proxy; the nodes reach their database at dbURL.
func (d *drill) startGateway(dbURL string) {
	d.book = dbtest.Pool(d.t)
	base, stop, err := sim.StartOnClock(d.ctx, d.book, d.clk, []string{"sim1"}, zerolog.Nop())
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = stop(context.Background()) })
	target, err := url.Parse(base)
	if err != nil {
		d.t.Fatal(err)
	}
	proxy := httptest.NewServer(d.calls.wrap(target))
	d.t.Cleanup(proxy.Close)
	d.env = map[string]string{
		"DATABASE_URL":            dbURL,
		"REBILL_DEV":              "1",
		"REBILL_ADMIN_KEY":        adminKey,
		"REBILL_ENCRYPTION_KEY":   encryptionKey,
		"REBILL_GATEWAYS":         gatewayName + "=" + proxy.URL + "/sim1",
		"REBILL_GATEWAY_TIMEOUT":  "400ms",
		"REBILL_RETRY_BASE":       "50ms",
		"REBILL_RETRY_MAX":        "500ms",
		"REBILL_SCAN_INTERVAL":    "200ms",
		"REBILL_RESCUE_AFTER":     "12s",
		"REBILL_BREAKER_OPEN_FOR": "1s",
		"REBILL_CATCH_UP_WINDOW":  "87600h",
		"REBILL_DUNNING_SCHEDULE": "24h,48h",
		"REBILL_SHUTDOWN_TIMEOUT": "5s",
		"REBILL_LOG_LEVEL":        "warn",
		"REBILL_DB_MAX_CONNS":     "8",
		"REBILL_INSPECT_INTERVAL": "1s",
	}
	d.startRegistry()
}

func (d *drill) startNodes() {
	dir := d.t.TempDir()
	for i := range 2 {
		p, err := proctest.Start(fmt.Sprintf("node %c", 'A'+i), proctest.Options{Dir: dir, Env: d.env})
		if err != nil {
			d.t.Fatal(err)
		}
		d.nodes = append(d.nodes, p)
		d.t.Cleanup(func() {
			if !p.Exited() {
				_, _ = p.Terminate(10 * time.Second)
			}
		})
		if err := p.WaitReady(90 * time.Second); err != nil {
			d.fatalf("%s: %v", p.Name, err)
		}
	}
}

// call sends one request to node i (the other when i does not answer) and
// repeats it with the same Idempotency-Key until rebill answers
// definitely: a failover makes answers fail for a while.
func (d *drill) call(i int, method, path, idemKey string, body any, out any) int {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	deadline := time.Now().Add(90 * time.Second)
	for attempt := 0; ; attempt++ {
		p := d.nodes[(i+attempt)%len(d.nodes)]
		req, _ := http.NewRequestWithContext(d.ctx, method, p.URL+path, bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode < 500 && res.StatusCode != http.StatusConflict {
				if out != nil && res.StatusCode < 300 {
					if err := json.Unmarshal(b, out); err != nil {
						d.fatalf("%s %s: decode %s: %v", method, path, b, err)
					}
				}
				if res.StatusCode >= 300 {
					d.fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
				}
				return res.StatusCode
			}
		}
		if time.Now().After(deadline) {
			d.fatalf("%s %s: no definite answer in 90 s (last error %v)", method, path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *drill) devNow() time.Time {
	var c struct {
		Now time.Time `json:"now"`
	}
	d.call(0, http.MethodGet, "/v1/dev/clock", "", nil, &c)
	return c.Now
}

// moveClock moves the gateway's clock, then the nodes'.
func (d *drill) moveClock(to time.Time) {
	d.clk.set(to)
	d.call(0, http.MethodPost, "/v1/dev/clock", fmt.Sprintf("drill-clock-%d", to.Unix()), map[string]any{"now": to.Format(time.RFC3339)}, nil)
}

// card is a subscription's test card: most pay, one in five declines for
// good (dunning runs out), one in five declines until a day has passed
// (dunning recovers it).
type card struct {
	token string
	kind  string
}

func (d *drill) cardOf(i int) card {
	switch (i + d.plan.seed) % 5 {
	case 0:
		return card{fmt.Sprintf("tok_decline_funds_%d", i), "declines"}
	case 1:
		return card{fmt.Sprintf("tok_funds_after_1d_%d", i), "recovers"}
	}
	return card{fmt.Sprintf("tok_ok_%d", i), "pays"}
}

type sub struct {
	id     uuid.UUID
	amount int64
	card   card
	// anchor is the start of the subscription's first period.
	anchor time.Time
}

// createSubscriptions creates subscriptions from..to-1, each under its own
// Idempotency-Key, so that creating them again asks the same question.
func (d *drill) createSubscriptions(anchor time.Time, from, to int) []sub {
	subs := make([]sub, 0, to-from)
	for i := from; i < to; i++ {
		c := d.cardOf(i)
		body := map[string]any{
			"customer_id": fmt.Sprintf("drill-%d", i), "amount": 1000 + i, "currency": "USD", "interval": "day", "timezone": "UTC",
			"billing_anchor": anchor.Format(time.RFC3339),
			"payment_method": map[string]any{"gateway": gatewayName, "token": c.token, "exp_month": 12, "exp_year": 2035},
		}
		var out struct {
			ID uuid.UUID `json:"id"`
		}
		d.call(i, http.MethodPost, "/v1/subscriptions", fmt.Sprintf("drill-sub-%d-%d", d.plan.seed, i), body, &out)
		subs = append(subs, sub{id: out.ID, amount: int64(1000 + i), card: c, anchor: anchor})
	}
	return subs
}

// bookCaptures counts the gateway's successful captures.
func (d *drill) bookCaptures() int {
	var n int
	if err := d.book.QueryRow(d.ctx, `SELECT count(*) FROM gatewaysim.operations WHERE op = 'capture' AND status = 'succeeded'`).Scan(&n); err != nil {
		d.fatalf("read the gateway's book: %v", err)
	}
	return n
}

// failover, in asynchronous mode, first cuts the replica off, so that
// nothing the primary commits from then on reaches it (a replica lagging
// behind the whole burst); moves the clock so billing starts; once the
// first captures are in, refunds some, changes some prices and has the
// issuers push their bills; kills the primary once half the fines are
// accepted at the registry; and promotes the replica.
func (d *drill) failover(subs []sub, to time.Time) {
	if !d.plan.sync {
		d.replicaExec(`ALTER SYSTEM SET primary_conninfo = ''`)
		d.replicaExec(`SELECT pg_reload_conf()`)
	}
	d.moveClock(to)
	// Enough captures to refund some, and most of the burst still to come.
	threshold := d.plan.subs/6 + d.plan.seed%5
	d.waitFor("the first captures", 60*time.Second, func() bool { return d.bookCaptures() >= threshold })
	d.refundSome()
	d.updateSome(subs, to)
	d.pushBills(to)
	d.waitFinesPosted()
	var lsn string
	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the primary: %v", err)
	}
	var chargesBefore int
	if err := conn.QueryRow(d.ctx, `SELECT count(*) FILTER (WHERE in_flight), count(*), pg_current_wal_lsn()::text FROM charges`).
		Scan(&d.fig.InFlightAtKill, &chargesBefore, &lsn); err != nil {
		d.fatalf("read the primary before the kill: %v", err)
	}
	d.idsAtKill = d.chargeIDs(conn)
	_ = conn.Close(d.ctx)
	d.calls.on.Store(true)
	if err := d.primary.Kill(d.ctx); err != nil {
		d.fatalf("%v", err)
	}
	d.fig.CapturesAtKill = d.bookCaptures()
	d.autopayAtKill()
	d.t.Logf("primary killed with %d charges in flight, %d captured at the gateway", d.fig.InFlightAtKill, d.fig.CapturesAtKill)

	var replayed string
	d.replicaQuery(`SELECT pg_last_wal_replay_lsn()::text`, &replayed)
	d.replicaQuery(fmt.Sprintf(`SELECT greatest(0, pg_wal_lsn_diff('%s', '%s'))::bigint`, lsn, replayed), &d.fig.WALBytesLost)
	// The replica still answers reads: once it has replayed all it
	// received, it shows what a promotion keeps. What it received may end
	// in a record the primary died writing (the WAL writer flushes whole
	// pages, a record may span them), which it never replays: a replay
	// position that stands still for two seconds is all there is.
	var last string
	steady := time.Now()
	d.waitFor("the replica to replay what it received", 30*time.Second, func() bool {
		var caught bool
		var at string
		d.replicaQuery(`SELECT pg_last_wal_replay_lsn()::text`, &at)
		d.replicaQuery(`SELECT pg_last_wal_replay_lsn() >= coalesce(pg_last_wal_receive_lsn(), '0/0')`, &caught)
		if at != last {
			last, steady = at, time.Now()
		}
		if !caught && time.Since(steady) > 2*time.Second {
			d.t.Logf("the replica stands at %s, short of what it received: the primary died writing a record", at)
			return true
		}
		return caught
	})
	var chargesKept int
	d.replicaQuery(`SELECT count(*) FROM charges`, &chargesKept)
	d.fig.ChargesLost = max(0, chargesBefore-chargesKept)
	d.fig.CapturesUnknown = d.forgotten()
	// River jobs the replica holds as running belonged to the dead
	// primary's sessions: none of them is running any more.
	d.replicaQuery(`SELECT count(*) FROM river_job WHERE state = 'running'`, &d.fig.OrphanJobs)
	promoted := time.Now()
	if err := d.replica.Promote(d.ctx); err != nil {
		d.fatalf("%v", err)
	}
	d.promoted = promoted
	// Every node answers a request that reads the database again.
	for i := range d.nodes {
		d.call(i, http.MethodGet, "/v1/dev/clock", "", nil, nil)
	}
	d.fig.Reconnected = time.Since(promoted).Round(10 * time.Millisecond).String()
	if !d.plan.sync {
		// The clock's move was lost with the rest: the operator moves it
		// again (the nodes never saw it go back).
		d.moveClock(to)
	}
	if d.plan.sync && d.fig.ChargesLost > 0 {
		d.failures = append(d.failures, fmt.Sprintf("synchronous replication lost commits: %d charge rows", d.fig.ChargesLost))
	}
}

// forgotten counts the charges the gateway captured that the promoted
// database does not hold as succeeded: the commits the failover lost.
func (d *drill) forgotten() int { return len(d.forgottenKeys()) }

// forgottenKeys are the keys of the charges the gateway captured that the
// database does not hold as succeeded.
func (d *drill) forgottenKeys() []string {
	captured := d.capturedKeys()
	held := map[string]bool{}
	for _, c := range d.chargeRows() {
		if c.status == "succeeded" {
			held[c.key] = true
		}
	}
	var out []string
	for key := range captured {
		if !held[key] {
			out = append(out, key)
		}
	}
	return out
}

// capturedKeys maps each charge key to the gateway's successful captures
// of it.
func (d *drill) capturedKeys() map[string]int {
	rows, err := d.book.Query(d.ctx, `SELECT idempotency_key FROM gatewaysim.operations WHERE op = 'capture' AND status = 'succeeded'`)
	if err != nil {
		d.fatalf("read the gateway's book: %v", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.fatalf("read the gateway's book: %v", err)
	}
	out := map[string]int{}
	for _, k := range keys {
		chargeKey, _, _, ok := charges.ParseGatewayKey(k)
		if !ok {
			d.failures = append(d.failures, fmt.Sprintf("gateway capture with a key rebill does not make: %q", k))
			continue
		}
		out[chargeKey]++
	}
	return out
}

type chargeRow struct {
	id uuid.UUID
	// sub is the subscription or the enrollment the charge bills.
	sub    uuid.UUID
	period string
	key    string
	status string
	reason string
}

func (d *drill) chargeRows() []chargeRow {
	conn, err := pgx.Connect(d.ctx, d.replica.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the promoted replica: %v", err)
	}
	defer conn.Close(d.ctx)
	rows, err := conn.Query(d.ctx, `SELECT id, coalesce(subscription_id, enrollment_id), period_key, status, coalesce(review_reason, '') FROM charges`)
	if err != nil {
		d.fatalf("read charges: %v", err)
	}
	var out []chargeRow
	for rows.Next() {
		var c chargeRow
		if err := rows.Scan(&c.id, &c.sub, &c.period, &c.status, &c.reason); err != nil {
			d.fatalf("read charges: %v", err)
		}
		c.key = charges.Key(c.sub, c.period)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		d.fatalf("read charges: %v", err)
	}
	return out
}

func (d *drill) replicaExec(sql string) {
	conn, err := pgx.Connect(d.ctx, d.replica.TCPURL("postgres"))
	if err != nil {
		d.fatalf("connect to the replica: %v", err)
	}
	defer conn.Close(d.ctx)
	if _, err := conn.Exec(d.ctx, sql); err != nil {
		d.fatalf("%s: %v", sql, err)
	}
}

func (d *drill) replicaQuery(sql string, dest any) { d.replicaQuery2(sql, dest) }

func (d *drill) replicaQuery2(sql string, dest any, args ...any) {
	conn, err := pgx.Connect(d.ctx, d.replica.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the replica: %v", err)
	}
	defer conn.Close(d.ctx)
	if err := conn.QueryRow(d.ctx, sql, args...).Scan(dest); err != nil {
		d.fatalf("%s: %v", sql, err)
	}
}

// settle lets the nodes bill what is due and finish what was in flight,
// then moves the clock a day at a time so dunning runs its course
// (retries at 24 h and 48 h), each day billed and settled before the next.
func (d *drill) settle(subs []sub, anchor time.Time) {
	d.waitBilled(subs, anchor.Add(48*time.Hour))
	d.resendUpdates(anchor.Add(48 * time.Hour).UTC().Format(time.DateOnly))
	d.waitQuiet()
	d.fig.SettledAfter = time.Since(d.promoted).Round(100 * time.Millisecond).String()
	for day := 3; day <= 5; day++ {
		start := anchor.Add(time.Duration(day) * 24 * time.Hour)
		// Nudges may have moved the clock a few minutes past the start.
		to := start
		if now := d.devNow(); now.After(to) {
			to = now
		}
		d.moveClock(to)
		d.waitBilled(subs, start)
		d.waitQuiet()
	}
}

// waitBilled waits until every subscription whose card can pay has a
// charge for the period that began at at.
func (d *drill) waitBilled(subs []sub, at time.Time) {
	key := at.UTC().Format(time.DateOnly)
	var ids []uuid.UUID
	for _, s := range subs {
		if s.card.kind != "declines" {
			ids = append(ids, s.id)
		}
	}
	d.waitForOr("every paying subscription charged for its period of "+key, 120*time.Second, func() bool {
		var n int
		d.replicaQuery2(`SELECT count(DISTINCT subscription_id) FROM charges WHERE period_key = $1 AND subscription_id = ANY($2)`, &n, key, ids)
		return n == len(ids)
	}, d.inFlight)
}

// waitQuiet waits until no charge is in flight. The inspector, which
// kicks a charge left in flight with no live job (its job's completion
// can outlive the commits a failover lost), judges age by the service
// clock, which in dev mode stands still: while charges stay in flight the
// clock is nudged two minutes every few seconds, as time would pass.
func (d *drill) waitQuiet() {
	deadline := time.Now().Add(120 * time.Second)
	nudge := time.Now().Add(4 * time.Second)
	for {
		var n int
		d.replicaQuery(`SELECT count(*) FROM charges WHERE in_flight`, &n)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.fatalf("waited 120s for no charge in flight\n%s", d.inFlight())
		}
		if time.Now().After(nudge) {
			d.fig.Nudges++
			d.moveClock(d.devNow().Add(2 * time.Minute))
			nudge = time.Now().Add(4 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inFlight describes the charges in flight and their jobs, for a drill
// that does not settle.
func (d *drill) inFlight() string {
	var b strings.Builder
	conn, err := pgx.Connect(d.ctx, d.replica.TCPURL("rebill"))
	if err != nil {
		return err.Error()
	}
	defer conn.Close(d.ctx)
	rows, err := conn.Query(d.ctx, `SELECT c.id::text, c.period_key, c.status, c.attempt_count, c.updated_at::text,
		coalesce((SELECT string_agg(j.kind || ':' || j.state || ':' || j.attempt || ':' || coalesce(j.scheduled_at::text, ''), ' ')
			FROM river_job j WHERE j.args ->> 'charge_id' = c.id::text), 'no job')
		FROM charges c WHERE c.in_flight ORDER BY c.updated_at LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var id, period, status, updated, jobs string
		var attempt int
		if err := rows.Scan(&id, &period, &status, &attempt, &updated, &jobs); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  charge %s period %s %s attempt %d updated %s; jobs %s\n", id, period, status, attempt, updated, jobs)
	}
	return b.String()
}

func (d *drill) waitFor(what string, limit time.Duration, ok func() bool) {
	d.waitForOr(what, limit, ok, func() string { return "" })
}

// waitForOr is waitFor that, on timeout, says what describe finds.
func (d *drill) waitForOr(what string, limit time.Duration, ok func() bool, describe func() string) {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			d.fatalf("waited %s for %s\n%s", limit, what, describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// judge holds the gateway's book against what each card owes: a paying or
// recovering card has every period that began captured exactly once, a
// declining one none; nothing is in flight; every review has a reason;
// rebill audit agrees.
func (d *drill) judge(subs []sub) {
	now := d.devNow()
	captured := d.capturedKeys()
	rows := d.chargeRows()
	bySub := map[uuid.UUID][]chargeRow{}
	for _, c := range rows {
		bySub[c.sub] = append(bySub[c.sub], c)
		switch c.status {
		case "scheduled", "authorizing", "authorized", "capturing", "unknown":
			d.failures = append(d.failures, fmt.Sprintf("charge %s of %s still %s after settling", c.period, c.sub, c.status))
		case "requires_review":
			d.fig.Reviews++
			d.fig.ReviewReasons = append(d.fig.ReviewReasons, c.reason)
			if c.reason == "" {
				d.failures = append(d.failures, fmt.Sprintf("charge %s of %s in review without a reason", c.period, c.sub))
			}
		}
		if c.status == "succeeded" && captured[c.key] == 0 {
			d.failures = append(d.failures, fmt.Sprintf("charge %s of %s succeeded with no capture at the gateway", c.period, c.sub))
		}
	}
	known := map[string]bool{}
	for _, c := range rows {
		known[c.key] = true
	}
	for key, n := range captured {
		if !known[key] {
			d.failures = append(d.failures, fmt.Sprintf("charge %s captured at the gateway and unknown to rebill after settling", key))
		}
		d.fig.GatewayCaptures += n
		if n > 1 {
			d.fig.DoubleCaptures++
			d.failures = append(d.failures, fmt.Sprintf("charge %s captured %d times at the gateway", key, n))
		}
	}
	for _, s := range subs {
		periods := int(now.Sub(s.anchor)/(24*time.Hour)) + 1
		got := 0
		for _, c := range bySub[s.id] {
			if captured[c.key] > 0 && !strings.Contains(c.period, ":adj:") {
				got++
			}
		}
		switch s.card.kind {
		case "declines":
			if got != 0 {
				d.failures = append(d.failures, fmt.Sprintf("subscription %s (declining card) has %d captured periods", s.id, got))
			}
		default:
			reviewed := 0
			for _, c := range bySub[s.id] {
				if c.status == "requires_review" && !strings.Contains(c.period, ":adj:") {
					reviewed++
				}
			}
			if got+reviewed != periods {
				d.failures = append(d.failures, fmt.Sprintf("subscription %s (%s) owes %d periods, %d captured and %d in review", s.id, s.card.kind, periods, got, reviewed))
			}
		}
	}
	d.judgeRefunds()
	d.judgeAutopay(captured)
	d.judgeUpdates(captured)
	d.audit()
	d.fig.Lookups, d.fig.Replays = d.calls.lookups.Load(), d.calls.replays.Load()
	d.fig.Violations = len(d.failures)
}

// refundSome refunds 100 of one in six subscriptions' first captured
// period through the API, while the primary lives: with asynchronous
// replication their commits are lost with it.
func (d *drill) refundSome() {
	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the primary: %v", err)
	}
	want := max(1, d.plan.subs/6)
	// The gateway's captures come before the database records them.
	d.waitFor("captured charges to refund", 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(d.ctx, `SELECT count(DISTINCT subscription_id) FROM charges WHERE status = 'succeeded'`).Scan(&n); err != nil {
			d.fatalf("count captured charges: %v", err)
		}
		return n >= want
	})
	rows, err := conn.Query(d.ctx, `SELECT DISTINCT ON (subscription_id) id, subscription_id, period_key FROM charges
		WHERE status = 'succeeded' AND subscription_id IS NOT NULL ORDER BY subscription_id, period_key LIMIT $1`, want)
	if err != nil {
		d.fatalf("find captured charges: %v", err)
	}
	type target struct {
		id uuid.UUID
		refundAsked
	}
	var targets []target
	for rows.Next() {
		var t target
		if err := rows.Scan(&t.id, &t.sub, &t.period); err != nil {
			d.fatalf("find captured charges: %v", err)
		}
		t.idem = fmt.Sprintf("drill-refund-%s-%s", t.sub, t.period)
		targets = append(targets, t)
	}
	_ = conn.Close(d.ctx)
	for i, t := range targets {
		d.call(i, http.MethodPost, "/v1/charges/"+t.id.String()+"/refunds", t.idem,
			map[string]any{"amount": 100, "reason": "requested_by_customer"}, nil)
		d.refunds = append(d.refunds, t.refundAsked)
	}
	d.fig.RefundsAsked = len(d.refunds)
}

// resendRefunds is the client finding, after the failover, a refund it
// was answered 201 for missing from its period's charge: it sends it
// again with the same Idempotency-Key (the record of which was lost too)
// on the charge the period has now. Then it waits for every refund to
// settle.
func (d *drill) resendRefunds() {
	var missing []int
	for i, r := range d.refunds {
		var n int
		d.replicaQuery2(`SELECT count(*) FROM refunds f JOIN charges c ON c.id = f.charge_id
			WHERE c.subscription_id = $1 AND c.period_key = $2`, &n, r.sub, r.period)
		if n == 0 {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		// A refund the gateway made and the database lost is not lost
		// silently: the audit reports it.
		found, _ := d.runAudit()
		for _, x := range found {
			if x.Kind == "refund_unknown_at_rebill" {
				d.fig.AuditFlaggedLostRefunds++
			}
		}
		gatewayMade := 0
		for _, i := range missing {
			r := d.refunds[i]
			var n int
			if err := d.book.QueryRow(d.ctx, `SELECT count(*) FROM gatewaysim.operations WHERE op = 'refund' AND status = 'succeeded'
				AND idempotency_key LIKE $1 || ':r%'`, charges.Key(r.sub, r.period)).Scan(&n); err != nil {
				d.fatalf("read the gateway's refunds: %v", err)
			}
			gatewayMade += n
		}
		if d.fig.AuditFlaggedLostRefunds < gatewayMade {
			d.failures = append(d.failures, fmt.Sprintf("%d refunds made at the gateway and lost by the database, %d reported by rebill audit",
				gatewayMade, d.fig.AuditFlaggedLostRefunds))
		}
	}
	for _, i := range missing {
		r := d.refunds[i]
		var id uuid.UUID
		d.replicaQuery2(`SELECT id FROM charges WHERE subscription_id = $1 AND period_key = $2 AND status = 'succeeded'`, &id, r.sub, r.period)
		d.call(i, http.MethodPost, "/v1/charges/"+id.String()+"/refunds", r.idem,
			map[string]any{"amount": 100, "reason": "requested_by_customer"}, nil)
		d.fig.RefundsResent++
	}
	d.waitFor("every refund settled", 60*time.Second, func() bool {
		var n int
		d.replicaQuery(`SELECT count(*) FROM refunds WHERE status IN ('pending', 'unknown')`, &n)
		return n == 0
	})
}

// chargeIDs maps each subscription charge's key to its id.
func (d *drill) chargeIDs(conn *pgx.Conn) map[string]uuid.UUID {
	rows, err := conn.Query(d.ctx, `SELECT id, subscription_id, period_key FROM charges WHERE subscription_id IS NOT NULL`)
	if err != nil {
		d.fatalf("read charge ids: %v", err)
	}
	defer rows.Close()
	out := map[string]uuid.UUID{}
	for rows.Next() {
		var id, sub uuid.UUID
		var period string
		if err := rows.Scan(&id, &sub, &period); err != nil {
			d.fatalf("read charge ids: %v", err)
		}
		out[charges.Key(sub, period)] = id
	}
	return out
}

// judgeRefunds holds the gateway's refunds against the client's: each
// asked refund of 100 performed once, under one key, and none other; and
// the promoted database holds each as succeeded.
func (d *drill) judgeRefunds() {
	rows, err := d.book.Query(d.ctx, `SELECT idempotency_key, amount FROM gatewaysim.operations WHERE op = 'refund' AND status = 'succeeded'`)
	if err != nil {
		d.fatalf("read the gateway's refunds: %v", err)
	}
	refunded := map[string][]int64{}
	for rows.Next() {
		var key string
		var amount int64
		if err := rows.Scan(&key, &amount); err != nil {
			d.fatalf("read the gateway's refunds: %v", err)
		}
		chargeKey, _, ok := charges.ParseRefundKey(key)
		if !ok {
			d.failures = append(d.failures, fmt.Sprintf("gateway refund with a key rebill does not make: %q", key))
			continue
		}
		refunded[chargeKey] = append(refunded[chargeKey], amount)
		d.fig.GatewayRefunds++
	}
	if err := rows.Err(); err != nil {
		d.fatalf("read the gateway's refunds: %v", err)
	}
	asked := map[string]bool{}
	for _, r := range d.refunds {
		key := charges.Key(r.sub, r.period)
		asked[key] = true
		if got := refunded[key]; len(got) != 1 || got[0] != 100 {
			d.failures = append(d.failures, fmt.Sprintf("refund of 100 asked on %s: the gateway refunded %v", key, got))
		}
		var n int
		d.replicaQuery2(`SELECT count(*) FROM refunds f JOIN charges c ON c.id = f.charge_id
			WHERE c.subscription_id = $1 AND c.period_key = $2 AND f.status = 'succeeded'`, &n, r.sub, r.period)
		if n != 1 {
			d.failures = append(d.failures, fmt.Sprintf("refund asked on %s: %d succeeded refunds in the database", key, n))
		}
	}
	for key, got := range refunded {
		if !asked[key] {
			d.failures = append(d.failures, fmt.Sprintf("the gateway refunded %v on %s, which no one asked", got, key))
		}
	}
	for _, c := range d.chargeRows() {
		if id, ok := d.idsAtKill[c.key]; ok && id != c.id {
			d.fig.ChargeIDsChanged++
		}
	}
}

// audit runs `rebill audit --json` on the promoted database.
func (d *drill) audit() {
	found, ok := d.runAudit()
	if !ok {
		return
	}
	d.fig.AuditDiscrepancies = len(found)
	for _, x := range found {
		d.failures = append(d.failures, "audit: "+string(x.raw))
	}
}

type discrepancy struct {
	Kind      string `json:"kind"`
	ChargeKey string `json:"charge_key"`
	raw       json.RawMessage
}

// runAudit runs `rebill audit --json` on the promoted database and
// returns its discrepancies; ok is false (a failure noted) when it gave
// no report. args are more of the command's flags.
func (d *drill) runAudit(args ...string) ([]discrepancy, bool) {
	env := os.Environ()
	for k, v := range d.env {
		env = append(env, k+"="+v)
	}
	env = append(env, "DATABASE_URL="+d.replica.TCPURL("rebill"))
	cmd := exec.CommandContext(d.ctx, proctest.Binary(d.t), append([]string{"audit", "--json"}, args...)...)
	cmd.Env = env
	cmd.Dir = d.t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var report struct {
		Discrepancies []json.RawMessage `json:"discrepancies"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		d.failures = append(d.failures, fmt.Sprintf("rebill audit: %v (%v)\n%s", err, runErr, stderr.String()))
		return nil, false
	}
	out := make([]discrepancy, len(report.Discrepancies))
	for i, raw := range report.Discrepancies {
		out[i].raw = raw
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			d.failures = append(d.failures, fmt.Sprintf("rebill audit: discrepancy %s: %v", raw, err))
		}
	}
	return out, true
}

func (d *drill) report() {
	line, _ := json.Marshal(d.fig)
	d.t.Logf("figures: %s", line)
	if *reportFlag != "" {
		if f, err := os.OpenFile(*reportFlag, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n", line)
			f.Close()
		}
	}
	if len(d.failures) > 0 {
		d.dumpLogs()
		d.t.Errorf("%s replication, seed %d: %d violations:\n  %s", d.fig.Mode, d.plan.seed, len(d.failures), strings.Join(d.failures, "\n  "))
	}
}

func (d *drill) dumpLogs() {
	for _, p := range d.nodes {
		d.t.Logf("==== %s\n%s", p.Name, proctest.Tail(p.Output(), 200<<10))
	}
}
