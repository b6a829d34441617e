package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/testkit/dbtest"
)

const adminKey = "e2e-admin-key-0123456789abcdefghij" // REBILL_ADMIN_KEY needs 32 characters

const testEncryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes, base64

// testEnv is the environment of a fast dev-mode node: short gateway
// timeouts and backoff so fault paths finish in seconds.
func testEnv(overrides map[string]string) func(string) string {
	env := map[string]string{
		"REBILL_DEV":              "1",
		"REBILL_ADMIN_KEY":        adminKey,
		"REBILL_GATEWAY_TIMEOUT":  "400ms",
		"REBILL_RETRY_BASE":       "50ms",
		"REBILL_RETRY_MAX":        "300ms",
		"REBILL_SCAN_INTERVAL":    "200ms",
		"REBILL_RESCUE_AFTER":     "15s",
		"REBILL_LOG_LEVEL":        "warn",
		"REBILL_DUNNING_SCHEDULE": "24h,72h,120h,168h",
		// Nodes share dbtest's small pool; this sizes each node's simulator
		// pool (2), so the suite fits a server others use too.
		"REBILL_DB_MAX_CONNS": "10",
		// Nodes on one database share the key that seals payment tokens.
		"REBILL_ENCRYPTION_KEY": testEncryptionKey,
	}
	for k, v := range overrides {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

type node struct {
	svc    *app.Service
	server *httptest.Server
}

type testBundle struct {
	pool  *pgxpool.Pool
	nodes []*node
}

// setup starts n nodes on one fresh database.
func setup(t *testing.T, n int, overrides map[string]string) testBundle {
	t.Helper()
	b := testBundle{pool: dbtest.Pool(t)}
	for i := 0; i < n; i++ {
		b.nodes = append(b.nodes, startNode(t, b.pool, overrides))
	}
	return b
}

func startNode(t *testing.T, pool *pgxpool.Pool, overrides map[string]string) *node {
	t.Helper()
	cfg, err := config.Load(testEnv(overrides))
	require.NoError(t, err)
	ctx := context.Background()
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(io.Discard))
	require.NoError(t, err)
	require.NoError(t, svc.River.Start(ctx))
	server := httptest.NewServer(openapitest.Wrap(t, svc.Handler)) // every exchange is checked against the OpenAPI document
	nd := &node{svc: svc, server: server}
	t.Cleanup(func() {
		server.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
		svc.Close()
	})
	return nd
}

func (b testBundle) url() string { return b.nodes[0].server.URL }

var keySeq int

// call sends an authenticated request; POSTs get a fresh Idempotency-Key.
func (b testBundle) call(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	status, out := b.callStatus(t, method, path, body)
	require.Less(t, status, 300, "%s %s: %v", method, path, out)
	return out
}

func (b testBundle) callStatus(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.url()+path, reader)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	if method == http.MethodPost {
		keySeq++
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d-%d", t.Name(), keySeq, time.Now().UnixNano()))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

func subscriptionBody(token, interval string) map[string]any {
	return map[string]any{
		"customer_id": "cust-e2e", "amount": 1500, "currency": "USD", "interval": interval, "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim1", "token": token, "exp_month": 12, "exp_year": 2035},
	}
}

func (b testBundle) createSubscription(t *testing.T, token, interval string) string {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/subscriptions", subscriptionBody(token, interval))["id"].(string)
}

func (b testBundle) charges(t *testing.T, subID string) []map[string]any {
	t.Helper()
	data := b.call(t, http.MethodGet, "/v1/subscriptions/"+subID+"/charges?limit=100", nil)["data"].([]any)
	out := make([]map[string]any, len(data))
	for i, d := range data {
		out[i] = d.(map[string]any)
	}
	return out
}

// waitCharges waits until the subscription has want charges, all in one of
// statuses, and returns them newest first.
func (b testBundle) waitCharges(t *testing.T, subID string, want int, statuses ...string) []map[string]any {
	t.Helper()
	return b.waitChargesWithin(t, 30*time.Second, subID, want, statuses...)
}

// waitChargesWithin is waitCharges with its own bound, for tests whose
// charges wait on a gateway on purpose; a timeout reports the charges last
// seen.
func (b testBundle) waitChargesWithin(t *testing.T, bound time.Duration, subID string, want int, statuses ...string) []map[string]any {
	t.Helper()
	var cs []map[string]any
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs = b.charges(t, subID)
		require.Len(c, cs, want, "charges of %s", subID)
		for _, ch := range cs {
			require.Contains(c, statuses, ch["status"], "charge %v of %s", ch["id"], subID)
		}
	}, bound, 50*time.Millisecond)
	return cs
}

type ledgerEntry struct {
	Op             string `json:"op"`
	IdempotencyKey string `json:"idempotency_key"`
	TokenLast4     string `json:"token_last4"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
}

func (b testBundle) ledger(t *testing.T, gateway string) []ledgerEntry {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+"/v1/dev/gateways/"+gateway+"/ledger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Data []ledgerEntry `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return out.Data
}

// opsFor counts a charge's ledger entries by op and status.
func opsFor(entries []ledgerEntry, chargeKey string) map[string]int {
	counts := map[string]int{}
	for _, e := range entries {
		if len(e.IdempotencyKey) > len(chargeKey) && e.IdempotencyKey[:len(chargeKey)] == chargeKey {
			counts[e.Op+":"+e.Status]++
		}
	}
	return counts
}

func (b testBundle) advance(t *testing.T, d string) {
	t.Helper()
	b.call(t, http.MethodPost, "/v1/dev/clock", map[string]any{"advance": d})
}

func (b testBundle) clockNow(t *testing.T) time.Time {
	t.Helper()
	now, err := time.Parse(time.RFC3339Nano, b.call(t, http.MethodGet, "/v1/dev/clock", nil)["now"].(string))
	require.NoError(t, err)
	return now
}

// scanNow runs a whole billing scan at the service clock and returns when
// it is done: whatever is due has its charge by then, so a test can assert
// that nothing was created without sleeping. The nodes' own periodic scans
// run beside it and a scan skips the rows another has locked, so it first
// waits out any scan begun at an earlier clock, and afterwards any begun
// with it, which handled what it skipped.
func (b testBundle) scanNow(t *testing.T) {
	t.Helper()
	b.waitJobsIdle(t, renewals.ScanArgs{}.Kind())
	_, err := b.nodes[0].svc.Renewals.Scan(context.Background(), b.clockNow(t))
	require.NoError(t, err)
	b.waitJobsIdle(t, renewals.ScanArgs{}.Kind())
}
