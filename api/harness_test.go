package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/usecases"
)

const adminKey = "test-admin-key"

var testEncryptionKey = []byte("0123456789abcdef0123456789abcdef")

type testBundle struct {
	pool   *pgxpool.Pool
	server *httptest.Server
	clock  *testsupport.Clock
	logs   *testsupport.LockedBuffer
}

type setupOpts struct {
	lease time.Duration
	pool  *pgxpool.Pool
	// allowPrivate lets webhooks go to http and private addresses.
	allowPrivate bool
	// dev, when set, builds the dev-mode dependencies on the test's pool.
	dev func(t *testing.T, pool *pgxpool.Pool) *api.Dev
	// gateways are the configured gateways of GET /v1/gateways.
	gateways *fleet.Gateways
	// experiments pick routing arms.
	experiments *experiments.Set
	// claimed runs between an idempotency claim and its handler.
	claimed func(ctx context.Context, scope, key string)
	// billing, when set, wraps the use cases the server calls (to watch
	// what a handler hands them).
	billing func(uses *usecases.Service) api.Billing
}

func setup(t *testing.T, opts ...setupOpts) testBundle {
	t.Helper()
	o := setupOpts{lease: time.Minute}
	if len(opts) > 0 {
		o = opts[0]
	}
	pool := o.pool
	if pool == nil {
		pool = dbtest.Pool(t)
	}
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	logs := &testsupport.LockedBuffer{}
	subs := subscriptions.NewStore(clk)
	subs.SetEventSink(&notify.Recorder{})
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	renewer := &renewals.Renewals{Pool: pool, Subscriptions: subs, Clock: clk, Charges: &charges.Store{Queue: insertOnly}, CatchUpWindow: 90 * 24 * time.Hour, BatchSize: 100}
	var dev *api.Dev
	if o.dev != nil {
		dev = o.dev(t, pool)
	}
	known := func(name string) bool { return name == "sim1" || name == "sim2" }
	keys, err := secrets.NewKeyring(testEncryptionKey)
	require.NoError(t, err)
	uses := &usecases.Service{Pool: pool, Subscriptions: subs, Renewals: renewer, KnownGateway: known, Clock: clk,
		Owners: charges.Owners{Subscriptions: renewals.Outcomes{Subscriptions: subs, Renewals: renewer}}}
	idem := idempotency.NewStore(pool, o.lease)
	idem.SetClaimedHook(o.claimed)
	var billing api.Billing = uses
	if o.billing != nil {
		billing = o.billing(uses)
	}
	srv := api.NewServer(api.Deps{
		Keys: apikeys.NewStore(pool, adminKey), Idempotency: idem,
		Billing: billing, Ready: pool.Ping, KnownGateway: known, Gateways: o.gateways,
		Dev: dev, ExperimentSet: o.experiments, Clock: clk,
		Logger: zerolog.New(logs),
		Webhooks: &notify.Webhooks{Pool: pool, Keys: keys, Policy: notify.URLPolicy{AllowPrivate: o.allowPrivate}, Clock: clk,
			Enqueue: insertOnly},
	})
	ts := httptest.NewServer(openapitest.Wrap(t, srv)) // every exchange is checked against the OpenAPI document
	t.Cleanup(ts.Close)
	// An error the API answers as a 500 is a defect or an error without a
	// code: no exchange of these tests should meet one.
	t.Cleanup(func() {
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, `"message":"request failed"`) {
				t.Errorf("a request failed as a 500: %s", line)
			}
		}
	})
	return testBundle{pool: pool, server: ts, clock: clk, logs: logs}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), string(r.body))
	return m
}

// do sends a request; idemKey "" sends no Idempotency-Key header.
func (b testBundle) do(t *testing.T, method, path, key, idemKey string, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.server.URL+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: data}
}

func (b testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// newKey creates an API key through the API and returns it.
func (b testBundle) newKey(t *testing.T, role, customer string) string {
	t.Helper()
	body := `{"role":"` + role + `"}`
	if customer != "" {
		body = `{"role":"` + role + `","customer_id":"` + customer + `"}`
	}
	res := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "key-"+role+customer, body)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	return res.json(t)["key"].(string)
}

const createBody = `{"customer_id":"cust-42","amount":49900,"currency":"RUB","interval":"month",
	"timezone":"Europe/Moscow","payment_method":{"gateway":"sim1","token":"tok_ok_visa","brand":"visa","last4":"4242",
	"exp_month":12,"exp_year":2030},"description":"Gym, monthly","metadata":{"k":"v"}}`

func createBodyFor(customer string) string {
	return `{"customer_id":"` + customer + `","amount":1000,"currency":"USD","interval":"week",
		"payment_method":{"gateway":"sim1","token":"tok_ok","exp_month":1,"exp_year":2031}}`
}
