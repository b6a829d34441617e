package e2e_test

// Tests that run the real `rebill` binary as a separate process: a smoke
// test of `rebill serve` on its private PostgreSQL cluster, and the
// crash-safety proof (SIGKILL a node in the middle of charging, start
// another, and check on the simulated provider's books that every period
// was charged exactly once).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/proctest"
)

// TestMain removes the binary the process tests built (lazily, once).
func TestMain(m *testing.M) { proctest.Main(m) }

// procBinary builds cmd/rebill once per test binary and returns its path.
func procBinary(t *testing.T) string {
	t.Helper()
	return proctest.Binary(t)
}

// procServer is one running `rebill serve`.
type procServer struct{ *proctest.Process }

// procFreePort finds a free TCP port on loopback (proctest.FreePort).
func procFreePort(t *testing.T) int {
	t.Helper()
	port, err := proctest.FreePort()
	require.NoError(t, err)
	return port
}

// procStart starts `rebill serve` with env on top of this process'
// environment (minus every REBILL_* and DATABASE_URL). The process is
// killed when the test ends, and its output is logged if the test failed.
func procStart(t *testing.T, name string, env map[string]string) *procServer {
	t.Helper()
	return &procServer{proctest.StartT(t, name, env)}
}

// waitReady waits until GET /readyz answers 200.
func (p *procServer) waitReady(t *testing.T, limit time.Duration) {
	t.Helper()
	require.NoError(t, p.WaitReady(limit))
}

// terminate sends SIGTERM and asserts a clean exit (code 0) within limit.
func (p *procServer) terminate(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	took, err := p.Terminate(limit)
	require.NoError(t, err)
	return took
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *procServer) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.Kill())
}

var (
	procHTTP = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	procSeq  atomic.Int64
)

// request sends an authenticated request (POSTs get a fresh
// Idempotency-Key) and returns the status and body. It does not touch t,
// so it may run on any goroutine.
func (p *procServer) request(method, path, key string, body any) (int, []byte, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, p.URL+path, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("proc-%d-%d", procSeq.Add(1), time.Now().UnixNano()))
	}
	res, err := procHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, data, err
}

// call sends a request, requires the status want, and decodes the body.
func (p *procServer) call(t *testing.T, method, path, key string, body any, want int) map[string]any {
	t.Helper()
	status, data, err := p.request(method, path, key, body)
	require.NoError(t, err, "%s %s", method, path)
	require.Equal(t, want, status, "%s %s: %s", method, path, data)
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out), "%s %s: %s", method, path, data)
	return out
}

func procSubscriptionBody(customerID string, anchor *time.Time) map[string]any {
	body := map[string]any{
		"customer_id": customerID, "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	}
	if anchor != nil {
		body["billing_anchor"] = anchor.UTC().Format(time.RFC3339Nano)
	}
	return body
}

// procPostmasterPID reads the server pid from a cluster's postmaster.pid;
// 0 when the file is absent.
func procPostmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	require.NoError(t, err, "postmaster.pid: %q", data)
	return pid
}

// procAlive tells whether pid is a live process (a zombie nobody reaped
// yet counts as gone).
func procAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so look after the last ')'.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// procSocketDir is where pgembed puts the socket of the cluster in dataDir
// (platform/pgembed socketDir).
func procSocketDir(dataDir string) string {
	base := os.TempDir()
	if len(base) > 64 {
		base = "/tmp"
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(base, "rebill-pgsock-"+hex.EncodeToString(sum[:6]))
}

// procDialable tells whether a Unix socket accepts connections.
func procDialable(path string) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func TestServeSmokeEmbeddedDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the rebill binary with its own PostgreSQL cluster")
	}
	dataDir := t.TempDir()
	// Running as root, pgembed hands the cluster to the postgres user and
	// moves it elsewhere if a parent folder is closed to that user;
	// t.TempDir's parent is mode 700, so open both.
	require.NoError(t, os.Chmod(filepath.Dir(dataDir), 0o755))
	require.NoError(t, os.Chmod(dataDir, 0o755))
	pgDir := filepath.Join(dataDir, "pg")

	// Whatever happens, leave no PostgreSQL server running from this folder,
	// nor the (then empty) socket folder pgembed made for it.
	t.Cleanup(func() {
		defer func() { _ = os.Remove(procSocketDir(pgDir)) }() // only if empty
		if pid := procPostmasterPID(t, pgDir); pid != 0 && procAlive(pid) {
			t.Logf("stopping leftover PostgreSQL server %d", pid)
			_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
			for i := 0; i < 100 && procAlive(pid); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	})

	start := time.Now()
	srv := procStart(t, "serve", map[string]string{
		"REBILL_DATA_DIR":  dataDir,
		"REBILL_DEV":       "1", // the simulated gateways, so the subscription can be charged
		"REBILL_LOG_LEVEL": "info",
	})
	srv.waitReady(t, 60*time.Second)
	ready := time.Since(start)

	_, err := os.Stat(filepath.Join(pgDir, "PG_VERSION"))
	require.NoError(t, err, "the private cluster lives in REBILL_DATA_DIR/pg")
	postmaster := procPostmasterPID(t, pgDir)
	require.NotZero(t, postmaster, "postmaster.pid in %s while serving", pgDir)
	require.True(t, procAlive(postmaster))

	key := regexp.MustCompile(`rbk_[A-Za-z0-9_-]{20,}`).FindString(srv.Stdout())
	require.NotEmpty(t, key, "first start prints an admin key on stdout; got %q", srv.Stdout())

	status, _, err := srv.request(http.MethodGet, "/v1/subscriptions", "rbk_wrong", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status)

	sub := srv.call(t, http.MethodPost, "/v1/subscriptions", key, procSubscriptionBody("cust-smoke", nil), http.StatusCreated)
	id, _ := sub["id"].(string)
	require.NotEmpty(t, id, "%v", sub)
	var charge map[string]any
	require.Eventually(t, func() bool {
		list := srv.call(t, http.MethodGet, "/v1/subscriptions/"+id+"/charges", key, nil, http.StatusOK)
		data, _ := list["data"].([]any)
		if len(data) != 1 {
			return false
		}
		charge, _ = data[0].(map[string]any)
		return charge["status"] == "succeeded"
	}, 30*time.Second, 100*time.Millisecond, "the first period's charge succeeds: %v", func() any { return charge })

	socket := filepath.Join(procSocketDir(pgDir), ".s.PGSQL.5432")
	socketSeen := procDialable(socket)

	stopTook := srv.terminate(t, 30*time.Second)
	if socketSeen {
		require.False(t, procDialable(socket), "the private cluster still accepts connections on %s", socket)
	} else {
		t.Logf("no socket at %s while serving (pgembed moved it?): not checked after exit", socket)
	}
	require.Zero(t, procPostmasterPID(t, pgDir), "postmaster.pid left in %s: the private cluster was not stopped", pgDir)
	require.Eventually(t, func() bool { return !procAlive(postmaster) }, 5*time.Second, 50*time.Millisecond,
		"postgres %d still running after rebill exited", postmaster)
	require.Contains(t, srv.Stderr(), `"message":"stopped"`)
	t.Logf("ready after %s (initdb included); SIGTERM to exit 0 in %s", ready.Round(time.Millisecond), stopTook.Round(time.Millisecond))
}

func TestCrashMidChargingChargesEachPeriodOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the rebill binary twice and kills one")
	}
	t.Parallel()
	const (
		subscriptions = 300
		creators      = 16
		key           = "proc-crash-admin-key-0123456789abcdef"
	)
	dbURL := dbtest.URL(t)
	db, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	env := map[string]string{
		"DATABASE_URL":           dbURL,
		"REBILL_DEV":             "1",
		"REBILL_ADMIN_KEY":       key,
		"REBILL_GATEWAY_TIMEOUT": "500ms",
		"REBILL_RETRY_BASE":      "100ms",
		"REBILL_RETRY_MAX":       "1s",
		"REBILL_SCAN_INTERVAL":   "500ms",
		"REBILL_RESCUE_AFTER":    "12s",
		"REBILL_LOG_LEVEL":       "info",
		"REBILL_DB_MAX_CONNS":    "10", // the suite shares the server
		// Both nodes open the payment tokens: one key (dev mode would
		// give each data folder its own).
		"REBILL_ENCRYPTION_KEY": testEncryptionKey,
	}
	ctx := context.Background()
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(ctx, query, args...).Scan(&n), query)
		return n
	}
	const capturesSQL = `SELECT count(*) FROM gatewaysim.operations WHERE gateway = 'sim1' AND op = 'capture' AND status = 'succeeded'`
	rowsText := func(sep, query string) string {
		t.Helper()
		rows, err := db.Query(ctx, query)
		require.NoError(t, err)
		defer rows.Close()
		var parts []string
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(vals), "["), "]"))
		}
		require.NoError(t, rows.Err())
		return strings.Join(parts, sep)
	}
	chargeStates := func() string { return rowsText("; ", `SELECT status, count(*) FROM charges GROUP BY 1 ORDER BY 1`) }
	jobStates := func() string {
		return rowsText("; ", `SELECT kind, state, count(*) FROM river_job WHERE kind LIKE 'charge_%' GROUP BY 1, 2 ORDER BY 1, 2`)
	}

	// Node A: create the subscriptions, due in an hour of the dev clock.
	a := procStart(t, "node A", env)
	a.waitReady(t, 60*time.Second)
	now, err := time.Parse(time.RFC3339Nano, a.call(t, http.MethodGet, "/v1/dev/clock", key, nil, http.StatusOK)["now"].(string))
	require.NoError(t, err)
	anchor := now.Add(time.Hour)

	createStart := time.Now()
	ids := make([]string, subscriptions)
	errs := make(chan error, subscriptions)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				status, data, err := a.request(http.MethodPost, "/v1/subscriptions", key,
					procSubscriptionBody(fmt.Sprintf("cust-crash-%03d", i), &anchor))
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("status %d: %s", status, data)
				}
				var sub struct {
					ID string `json:"id"`
				}
				if err == nil {
					err = json.Unmarshal(data, &sub)
				}
				if err != nil {
					errs <- fmt.Errorf("create subscription %d: %w", i, err)
					continue
				}
				ids[i] = sub.ID
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	createTook := time.Since(createStart)
	require.Equal(t, subscriptions, count(`SELECT count(*) FROM subscriptions`))
	require.Zero(t, count(`SELECT count(*) FROM charges`), "nothing is due before the anchor")

	// Slow the gateway down, move the clock past the anchor, and kill A
	// while it is charging.
	a.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", key, map[string]any{"latency_ms": 20}, http.StatusOK)
	advanced := time.Now()
	a.call(t, http.MethodPost, "/v1/dev/clock", key, map[string]any{"advance": "1h"}, http.StatusOK)
	var seen int
	require.Eventually(t, func() bool {
		seen = count(capturesSQL)
		return seen >= subscriptions/5
	}, 60*time.Second, 2*time.Millisecond, "captures before the kill: %d", func() any { return seen })
	a.kill(t)
	killedAfter := time.Since(advanced)
	capturedByA := count(capturesSQL)
	authorizedByA := count(`SELECT count(*) FROM gatewaysim.operations WHERE gateway = 'sim1' AND op = 'authorize' AND status = 'succeeded'`)
	chargesAtKill, jobsAtKill := chargeStates(), jobStates()
	t.Logf("created %d subscriptions in %s; killed A %s after the clock moved, with %d captures and %d authorizations in the ledger (%d seen when deciding)",
		subscriptions, createTook.Round(time.Millisecond), killedAfter.Round(time.Millisecond), capturedByA, authorizedByA, seen)
	t.Logf("charges at kill: %s", chargesAtKill)
	t.Logf("charge jobs at kill: %s", jobsAtKill)
	require.GreaterOrEqual(t, capturedByA, 1, "A captured nothing before the kill")
	require.Less(t, capturedByA, subscriptions, "A finished before the kill: no crash mid-way (make charging slower)")

	// Node B on the same database finishes the work, rescuing A's jobs.
	bStart := time.Now()
	b := procStart(t, "node B", env)
	b.waitReady(t, 60*time.Second)
	bReady := time.Since(bStart)
	const recoverLimit = 90 * time.Second
	if !procEventually(t, recoverLimit, func() bool {
		return count(`SELECT count(*) FROM charges WHERE status = 'succeeded'`) == subscriptions
	}) {
		t.Fatalf("not every charge succeeded within %s of starting B.\ncharges: %s\ncharge jobs: %s\nunfinished charges:\n%s\nunfinished jobs:\n%s", recoverLimit,
			chargeStates(), jobStates(),
			rowsText("\n", `SELECT id::text, status, attempt_count, unknown_phase, authorization_ref IS NOT NULL, updated_at FROM charges WHERE status <> 'succeeded' ORDER BY updated_at LIMIT 20`),
			rowsText("\n", `SELECT id, kind, state, attempt, max_attempts, attempted_at, scheduled_at, args::text, errors::text FROM river_job WHERE kind LIKE 'charge_%' AND state NOT IN ('completed') ORDER BY id LIMIT 20`))
	}
	finished := time.Since(bStart)
	states := chargeStates()
	t.Logf("B ready %s after start; all %d charges succeeded %s after B started (%s after the clock moved); charges: %s; charge jobs: %s",
		bReady.Round(time.Millisecond), subscriptions, finished.Round(time.Millisecond), time.Since(advanced).Round(time.Millisecond), states, jobStates())

	// One charge per subscription, and on the provider's books exactly one
	// succeeded authorization and one succeeded capture per charge.
	require.Equal(t, subscriptions, count(`SELECT count(*) FROM charges`))
	require.Equal(t, subscriptions, count(`SELECT count(DISTINCT subscription_id) FROM charges`))
	chargeKeys := map[string]bool{}
	rows, err := db.Query(ctx, `SELECT subscription_id::text || ':' || period_key FROM charges`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		chargeKeys[k] = true
	}
	require.NoError(t, rows.Err())
	rows.Close()
	for _, id := range ids {
		found := false
		for k := range chargeKeys {
			found = found || strings.HasPrefix(k, id+":")
		}
		require.True(t, found, "no charge for subscription %s", id)
	}

	ledger := map[string]map[string]int{} // charge key -> "op:status:key suffix" -> count
	rows, err = db.Query(ctx, `SELECT charge_key, op, status, idempotency_key, count(*) FROM gatewaysim.operations
		WHERE gateway = 'sim1' GROUP BY 1, 2, 3, 4`)
	require.NoError(t, err)
	for rows.Next() {
		var chargeKey, op, status, idemKey string
		var n int
		require.NoError(t, rows.Scan(&chargeKey, &op, &status, &idemKey, &n))
		if ledger[chargeKey] == nil {
			ledger[chargeKey] = map[string]int{}
		}
		ledger[chargeKey][op+":"+status+":"+strings.TrimPrefix(idemKey, chargeKey)] += n
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Len(t, ledger, subscriptions, "charge keys in the ledger")
	want := map[string]int{"authorize:succeeded::a1:authorize": 1, "capture:succeeded::a1:capture": 1}
	for k := range chargeKeys {
		require.Equal(t, want, ledger[k], "ledger of charge %s", k)
	}
	require.Equal(t, subscriptions, count(capturesSQL), "captures in the ledger")
	require.Equal(t, subscriptions, count(`SELECT count(DISTINCT charge_key) FROM gatewaysim.operations WHERE gateway = 'sim1' AND op = 'capture'`))
	require.Zero(t, count(`SELECT count(*) FROM gatewaysim.operations WHERE gateway <> 'sim1'`), "no other gateway was used")

	stopTook := b.terminate(t, 30*time.Second)
	t.Logf("B stopped on SIGTERM in %s", stopTook.Round(time.Millisecond))

	// The self-audit agrees and exits 0; a second capture of one period
	// slipped into the gateway's books makes it exit 1, naming it.
	code, out := procAudit(t, env)
	require.Equal(t, 0, code, out)
	requireAuditCount(t, out, "captured", subscriptions)
	requireAuditCount(t, out, "discrepancies", 0)
	var dupKey string
	require.NoError(t, db.QueryRow(ctx, `SELECT subscription_id::text || ':' || period_key FROM charges LIMIT 1`).Scan(&dupKey))
	_, err = db.Exec(ctx, `INSERT INTO gatewaysim.operations (gateway, op, idempotency_key, reference, token_last4, token_kind,
			charge_key, amount, currency, status)
		SELECT gateway, 'capture', charge_key || ':a2:capture', 'sim1_op_injected', token_last4, token_kind, charge_key, amount,
			currency, 'succeeded'
		FROM gatewaysim.operations WHERE charge_key = $1 AND op = 'capture'`, dupKey)
	require.NoError(t, err)
	code, out = procAudit(t, env, "--json")
	require.Equal(t, 1, code, out)
	var report auditReport
	require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	require.Equal(t, subscriptions, report.Periods)
	require.Len(t, report.Discrepancies, 1, out)
	require.Equal(t, "duplicate_capture", report.Discrepancies[0].Kind)
	require.Equal(t, dupKey, report.Discrepancies[0].ChargeKey)
}

// procEventually polls cond every 200ms until it holds or limit passes.
func procEventually(t *testing.T, limit time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}
