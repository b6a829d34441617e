package e2e_test

// Fines on a node with no state payment registry (production mode: no
// REBILL_DEV, and no production registry adapter yet). Such a node must
// never hold or capture a fine: fines enrollments are refused, fines'
// bills wait, an attempt already created waits unsent, and the node says
// so when it starts. A dev-mode node (with its simulated registry) on the
// same database then pays what waited, exactly once.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// startTestSim serves the simulated gateway sim1 on loopback, keeping its
// books in the database's gatewaysim schema (the books dev mode's sim1
// keeps too), for a production node to be configured with.
func startTestSim(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	baseURL, stop, err := sim.Start(ctx, pool, []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stop(context.Background())
		pool.Close()
	})
	return baseURL
}

// noRegistryEnv makes testEnv a production node's: no dev mode, so no
// registry, and sim1 as its one configured gateway.
func noRegistryEnv(simURL string) map[string]string {
	return map[string]string{"REBILL_DEV": "", "REBILL_GATEWAYS": "sim1=" + simURL + "/sim1"}
}

// stoppableNode is a node built as `rebill serve` builds it, which the test
// stops to start another on the same database.
type stoppableNode struct {
	*node
	log  *testsupport.LockedBuffer
	stop func()
}

// startNodeOn builds a node on pool; run starts its River client (a node
// that never runs its jobs stands for one that died right after it
// committed the requests it answered).
func startNodeOn(t *testing.T, pool *pgxpool.Pool, overrides map[string]string, run bool) *stoppableNode {
	t.Helper()
	cfg, err := config.Load(testEnv(overrides))
	require.NoError(t, err)
	ctx := context.Background()
	logs := &testsupport.LockedBuffer{}
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(logs).Level(zerolog.WarnLevel))
	require.NoError(t, err)
	if run {
		require.NoError(t, svc.River.Start(ctx))
	}
	server := httptest.NewServer(openapitest.Wrap(t, svc.Handler))
	var once sync.Once
	n := &stoppableNode{node: &node{svc: svc, server: server}, log: logs}
	n.stop = func() {
		once.Do(func() {
			server.Close()
			if run {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, svc.River.Stop(stopCtx))
			}
			svc.Close()
		})
	}
	t.Cleanup(n.stop)
	return n
}

func (n *stoppableNode) bundle(pool *pgxpool.Pool) testBundle {
	return testBundle{pool: pool, nodes: []*node{n.node}}
}

// postKeyed sends an admin POST under the Idempotency-Key key.
func postKeyed(t *testing.T, baseURL, path, apiKey, key string, body any) (int, map[string]any) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, baseURL+path, bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return res.StatusCode, out
}

func finesEnrollmentBody(customer, sts string) map[string]any {
	return map[string]any{
		"customer_id": customer, "kind": "fines", "account_ref": map[string]any{"sts": sts},
		"currency": "RUB", "max_amount": 500000,
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	}
}

// dueFine is a fine issued an hour ago with its discount running for 20
// more days: due at once, at the discounted 50000.
func dueFine(id string) map[string]any {
	now := time.Now().UTC()
	return fine(id, 100000, 50000, now.Add(-time.Hour), now.AddDate(0, 0, 20).Format(time.DateOnly),
		now.AddDate(0, 0, 70).Format(time.DateOnly))
}

func countRows(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), query, args...).Scan(&n), query)
	return n
}

// gatewayOps counts the operations any simulated gateway received for a
// charge key, whichever node sent them.
func gatewayOps(t *testing.T, pool *pgxpool.Pool, chargeKey string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT op || ':' || status, count(*)::int FROM gatewaysim.operations
		WHERE charge_key = $1 GROUP BY 1`, chargeKey)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// The production node, run as users run it (`rebill serve`, no REBILL_DEV):
// a fines enrollment is 409 registry-not-configured, nothing is created and
// nothing is kept under the Idempotency-Key; housing still enrols; and the
// start log warns that no registry is configured, naming no secret.
func TestProductionNodeRefusesFinesEnrollmentsAndWarnsAtStart(t *testing.T) {
	t.Parallel()
	const adminKey = "production-admin-key-0123456789abcdef0123"
	dbURL := dbtest.URL(t)
	simURL := startTestSim(t, dbURL)
	db, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	prod := procStart(t, "prod", map[string]string{
		"DATABASE_URL": dbURL, "REBILL_ADMIN_KEY": adminKey, "REBILL_LOG_LEVEL": "warn", "REBILL_DB_MAX_CONNS": "10",
		"REBILL_ENCRYPTION_KEY": testEncryptionKey, "REBILL_GATEWAYS": "sim1=" + simURL + "/sim1",
	})
	prod.waitReady(t, 60*time.Second)

	const key = "fines-without-registry-1"
	status, body := postKeyed(t, prod.URL, "/v1/enrollments", adminKey, key, finesEnrollmentBody("cust-prod", "77УА123456"))
	require.Equal(t, http.StatusConflict, status, "%v", body)
	require.Equal(t, "https://rebill.dev/problems/registry-not-configured", body["type"])
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM enrollments`), "nothing created")
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key),
		"the refusal is not kept under its key: a retry once a registry is configured runs afresh")
	status, body = postKeyed(t, prod.URL, "/v1/enrollments", adminKey, key, finesEnrollmentBody("cust-prod", "77УА123456"))
	require.Equal(t, http.StatusConflict, status, "the same key is executed again, not replayed: %v", body)

	status, body = postKeyed(t, prod.URL, "/v1/enrollments", adminKey, "housing-without-registry-1", map[string]any{
		"customer_id": "cust-prod", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 1000000,
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})
	require.Equal(t, http.StatusCreated, status, "%v", body)
	require.Equal(t, "housing", body["kind"])
	require.Equal(t, 1, countRows(t, db, `SELECT count(*) FROM enrollments WHERE kind = 'housing'`))

	prod.terminate(t, 30*time.Second)
	logs := prod.Stdout() + prod.Stderr()
	require.Contains(t, logs, "no state payment registry is configured")
	require.Contains(t, logs, "registry-not-configured")
	for _, secret := range []string{adminKey, testEncryptionKey, "tok_ok"} {
		require.NotContains(t, logs, secret)
	}
}

// A fines enrollment created while a registry existed, on a node that
// restarts without one: a due fine waits in awaiting_registry (with its
// event) and reaches no gateway; the refused enrollment's key is executed
// afresh on a node with a registry; and that node pays the waiting fine
// exactly once, posted to the registry at the amount captured.
func TestFineWaitsForARegistryThenIsPaidOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())

	dev := startNodeOn(t, pool, nil, true)
	enr := dev.bundle(pool).createFinesEnrollment(t, "tok_ok", 500000)
	dev.stop()

	prod := startNodeOn(t, pool, noRegistryEnv(simURL), true)
	pb := prod.bundle(pool)
	require.Contains(t, prod.log.String(), "no state payment registry is configured")
	const key = "fines-enrollment-once-registry"
	status, body := postKeyed(t, prod.server.URL, "/v1/enrollments", adminKey, key, finesEnrollmentBody("cust-later", "77УА654321"))
	require.Equal(t, http.StatusConflict, status, "%v", body)
	require.Equal(t, "https://rebill.dev/problems/registry-not-configured", body["type"])
	require.Equal(t, 1, countRows(t, pool, `SELECT count(*) FROM enrollments`))

	id := uin(41)
	chargeKey := enr + ":" + id
	pushedAt := time.Now()
	pushed := pb.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(id))
	require.Equal(t, "awaiting_registry", pushed["status"])
	for _, typ := range []string{"bill.received", "bill.awaiting_registry"} {
		events := pb.call(t, http.MethodGet, "/v1/events?type="+typ+"&object_id="+pushed["id"].(string), nil)["data"].([]any)
		require.Len(t, events, 1, typ)
		requireSameObject(t, pushed, events[0].(map[string]any)["data"].(map[string]any)["object"].(map[string]any),
			"the %s event's object against the push's response", typ)
	}
	// Still waiting after two whole bill scans of the production node.
	require.Eventually(t, func() bool {
		return countRows(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'bills_scan' AND state = 'completed'
			AND finalized_at > $1`, pushedAt) >= 2
	}, 30*time.Second, 20*time.Millisecond, "bill scans after the push")
	require.Equal(t, "awaiting_registry", pb.bills(t, enr)[0]["status"])
	var types []string
	for _, e := range pb.call(t, http.MethodGet, "/v1/events?object_id="+enr+"&limit=100", nil)["data"].([]any) {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	require.Contains(t, types, "bill.awaiting_registry")
	require.Empty(t, pb.enrollmentCharges(t, enr), "no charge while no registry can be told")
	require.Empty(t, gatewayOps(t, pool, chargeKey), "no authorize reached a gateway")
	prod.stop()

	dev = startNodeOn(t, pool, nil, true)
	db := dev.bundle(pool)
	db.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": time.Now().UTC().Add(time.Minute).Format(time.RFC3339)})
	db.waitBill(t, enr, id, "paid")
	status, body = postKeyed(t, dev.server.URL, "/v1/enrollments", adminKey, key, finesEnrollmentBody("cust-later", "77УА654321"))
	require.Equal(t, http.StatusCreated, status, "the refused key is executed afresh once a registry exists: %v", body)

	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, gatewayOps(t, pool, chargeKey))
	require.Equal(t, []int64{50000}, captured(db.ledger(t, "sim1"), chargeKey))
	posted := db.registryLedger(t, id)
	require.Len(t, posted, 1, "one posting of the fine")
	require.Equal(t, "accepted", posted[0].Status)
	require.EqualValues(t, 50000, posted[0].Amount)
	cs := db.enrollmentCharges(t, enr)
	require.Len(t, cs, 1)
	require.Equal(t, "succeeded", cs[0]["status"])
}

// A fine's charge created while a registry existed, whose node died before
// its authorize ran, picked up by a node that has no registry: the
// authorize is never sent (however often its job runs) and the charge says
// why; a node with a registry then pays it once.
func TestFineChargedBeforeTheRegistryWentAwayIsNotAuthorized(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())

	dead := startNodeOn(t, pool, nil, false)
	b := dead.bundle(pool)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(42)
	chargeKey := enr + ":" + id
	require.Equal(t, "paying", b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(id))["status"])
	require.Equal(t, 1, countRows(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'charge_authorize' AND state = 'available'`))
	dead.stop()

	prod := startNodeOn(t, pool, noRegistryEnv(simURL), true)
	pb := prod.bundle(pool)
	// Each run that holds the attempt back puts it off anew (a snooze
	// does not count as a job attempt): three distinct waits are three runs.
	waits := map[time.Time]bool{}
	require.Eventually(t, func() bool {
		var at *time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT max(next_attempt_at) FROM charges
			WHERE failure_code = 'registry_not_configured'`).Scan(&at))
		if at != nil {
			waits[*at] = true
		}
		return len(gatewayOps(t, pool, chargeKey)) > 0 || len(waits) >= 3
	}, 30*time.Second, 10*time.Millisecond, "the authorize job held back three times: %v", func() any { return waits })
	require.Empty(t, gatewayOps(t, pool, chargeKey), "no authorize sent without a registry")
	cs := pb.enrollmentCharges(t, enr)
	require.Len(t, cs, 1)
	require.Equal(t, "scheduled", cs[0]["status"])
	require.Equal(t, "registry_not_configured", cs[0]["failure_code"])
	require.Equal(t, "paying", pb.bills(t, enr)[0]["status"])
	prod.stop()

	dev := startNodeOn(t, pool, nil, true)
	db := dev.bundle(pool)
	// The production node put the attempt off on the wall clock; the dev
	// clock still stands where the first node left it.
	db.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"now": time.Now().UTC().Add(time.Minute).Format(time.RFC3339)})
	db.waitBill(t, enr, id, "paid")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, gatewayOps(t, pool, chargeKey))
	posted := db.registryLedger(t, id)
	require.Len(t, posted, 1)
	require.Equal(t, "accepted", posted[0].Status)
	require.EqualValues(t, 50000, posted[0].Amount)
	require.Equal(t, "succeeded", db.enrollmentCharges(t, enr)[0]["status"])
	require.False(t, strings.Contains(fmt.Sprint(db.enrollmentCharges(t, enr)), "registry_not_configured"),
		"the waiting reason is cleared once paid")
}
