package api_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
)

// Only the canonical form of an id names an object: the same uuid spelt in
// braces, as a URN, in upper case or without hyphens is another URL, and
// answering it would give one object many addresses (and caches, logs and
// rate limits many keys for it).
func TestNonCanonicalIDsAre404(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	id := res.json(t)["id"].(string)
	charges := b.do(t, http.MethodGet, "/v1/subscriptions/"+id+"/charges", adminKey, "", "").json(t)["data"].([]any)
	require.Len(t, charges, 1, "the first period was charged at creation")
	chargeID := charges[0].(map[string]any)["id"].(string)

	forms := func(id string) []string {
		return []string{"{" + id + "}", "urn:uuid:" + id, strings.ToUpper(id), strings.ReplaceAll(id, "-", "")}
	}
	for _, form := range forms(id) {
		for _, path := range []string{"", "/events", "/charges"} {
			res := b.do(t, http.MethodGet, "/v1/subscriptions/"+form+path, adminKey, "", "")
			require.Equal(t, http.StatusNotFound, res.status, form+path)
		}
		res := b.do(t, http.MethodPost, "/v1/subscriptions/"+form+"/pause", adminKey, "pause-"+form, `{}`)
		require.Equal(t, http.StatusNotFound, res.status, form)
	}
	for _, form := range forms(chargeID) {
		require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/charges/"+form, adminKey, "", "").status, form)
	}
	// Cursors that hold an id are refused in any other form too.
	for _, form := range forms(id) {
		cursor := base64.RawURLEncoding.EncodeToString([]byte(form))
		for _, path := range []string{"/v1/subscriptions", "/v1/subscriptions/" + id + "/charges"} {
			res := b.do(t, http.MethodGet, path+"?cursor="+cursor, adminKey, "", "")
			require.Equal(t, http.StatusBadRequest, res.status, path+" "+form)
		}
	}
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/charges/"+chargeID, adminKey, "", "").status)
	require.Equal(t, "active", b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)["status"])
}

// Auth schemes are case-insensitive (RFC 9110, section 11.1).
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	get := func(authorization string) int {
		req, err := http.NewRequest(http.MethodGet, b.server.URL+"/v1/subscriptions", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", authorization)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		require.Equal(t, http.StatusOK, get(scheme+" "+adminKey), scheme)
	}
	require.Equal(t, http.StatusOK, get("Bearer   "+adminKey), "spaces before the token")
	for _, bad := range []string{"Basic " + adminKey, "Bearer" + adminKey, adminKey, "Bearer ", "Bearerx " + adminKey} {
		require.Equal(t, http.StatusUnauthorized, get(bad), bad)
	}
}

// PostgreSQL refuses NUL in text; a request carrying one is a 400 naming
// the field, not a 500 from the database.
func TestNULInAStringIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := func(old, new string) string { return strings.Replace(createBody, old, new, 1) }
	cases := map[string]struct{ body, field string }{
		"customer_id":    {replace(`"cust-42"`, `"cust\u0000-42"`), "customer_id"},
		"description":    {replace(`"Gym, monthly"`, `"Gym\u0000"`), "description"},
		"metadata value": {replace(`{"k":"v"}`, `{"k":"v\u0000"}`), "metadata.k"},
		"metadata key":   {replace(`{"k":"v"}`, `{"k\u0000":"v"}`), "metadata"},
		"token":          {replace(`"tok_ok_visa"`, `"tok_ok\u0000"`), "payment_method.token"},
		"brand":          {replace(`"visa"`, `"vi\u0000sa"`), "payment_method.brand"},
		"timezone":       {replace(`"Europe/Moscow"`, `"Europe/Moscow\u0000"`), "timezone"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "nul-"+name, tc.body)
			require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
			errs := res.json(t)["errors"].([]any)
			require.NotEmpty(t, errs)
			require.Equal(t, tc.field, errs[0].(map[string]any)["field"])
		})
	}
	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "idempotency_keys"))

	res := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "nul-key", `{"role":"customer","customer_id":"a\u0000"}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	res = b.do(t, http.MethodGet, "/v1/subscriptions?customer_id=a%00", adminKey, "", "")
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
}

// A database outage is the server's temporary condition, not a bug: reads
// answer 503 with Retry-After, so clients and load balancers back off and
// retry instead of reporting an internal error.
func TestDatabaseOutageIs503(t *testing.T) {
	t.Parallel()
	id := "01a22eea-e7fb-7315-b9c6-eee707cf3d79"
	paths := []string{"/v1/subscriptions/" + id, "/v1/subscriptions", "/v1/subscriptions/" + id + "/charges",
		"/v1/charges/" + id, "/v1/review-queue"}
	check := func(t *testing.T, b testBundle) {
		t.Helper()
		for _, path := range paths {
			res := b.do(t, http.MethodGet, path, adminKey, "", "")
			require.Equal(t, http.StatusServiceUnavailable, res.status, path+": "+string(res.body))
			require.Equal(t, "1", res.header.Get("Retry-After"), path)
			require.Equal(t, "application/problem+json", res.header.Get("Content-Type"), path)
		}
	}

	t.Run("nothing listens", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		check(t, setup(t, setupOpts{lease: time.Minute, pool: pool}))
	})

	t.Run("database dropped under open connections", func(t *testing.T) {
		t.Parallel()
		url := dbtest.URL(t)
		pool, err := pgxpool.New(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := setup(t, setupOpts{lease: time.Minute, pool: pool})
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions", adminKey, "", "").status)

		admin, err := pgx.Connect(context.Background(), dbtest.ServerURL(t))
		require.NoError(t, err)
		defer admin.Close(context.Background())
		_, err = admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{pool.Config().ConnConfig.Database}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
		check(t, b)
	})

	t.Run("pool closed", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.Pool(t)
		b := setup(t, setupOpts{lease: time.Minute, pool: pool})
		pool.Close()
		check(t, b)
	})
}

// An anchor is at most ten years ahead of the service clock: further out
// is a typo, and near year 9999 the periods cannot even be written as
// RFC 3339, which blanked every list page that held such a subscription.
func TestBillingAnchorHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t) // the service clock reads 2026-12-01T09:00:00Z
	withAnchor := func(anchor string) string {
		return strings.Replace(createBody, `"timezone"`, `"billing_anchor":"`+anchor+`","timezone"`, 1)
	}
	for _, anchor := range []string{"9999-06-01T00:00:00Z", "9999-12-31T23:59:59Z", "2036-12-01T09:00:01Z"} {
		res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "far-"+anchor, withAnchor(anchor))
		require.Equal(t, http.StatusBadRequest, res.status, anchor+": "+string(res.body))
		require.Equal(t, "billing_anchor", res.json(t)["errors"].([]any)[0].(map[string]any)["field"])
	}
	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "idempotency_keys"))

	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "edge", withAnchor("2036-12-01T09:00:00Z"))
	require.Equal(t, http.StatusCreated, res.status, "ten years to the second is allowed: "+string(res.body))
	list := b.do(t, http.MethodGet, "/v1/subscriptions", adminKey, "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Len(t, list.json(t)["data"], 1)
}

// A new API key is shown once. The idempotency record must not keep it:
// a replay answers the object without the key, and the database holds
// nothing from which the key could be read back.
func TestAPIKeyIsShownOnceAndNeverStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "new-key", `{"role":"customer","customer_id":"alice"}`)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))
	created := first.json(t)
	key, _ := created["key"].(string)
	require.True(t, strings.HasPrefix(key, "rbk_"), string(first.body))
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions", key, "", "").status, "the key works")

	replay := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "new-key", `{"customer_id":"alice","role":"customer"}`)
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.header.Get("Content-Type"), replay.header.Get("Content-Type"))
	require.NotContains(t, string(replay.body), key)
	again := replay.json(t)
	require.NotContains(t, again, "key")
	delete(created, "key")
	require.Equal(t, created, again, "the same object, without the key")
	require.Equal(t, 1, b.count(t, "api_keys"), "the replay created no second key")

	var holding int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM idempotency_keys WHERE position(convert_to($1, 'UTF8') IN response_body) > 0
			OR response_headers::text LIKE '%' || $1 || '%')
		+ (SELECT count(*) FROM api_keys k WHERE k::text LIKE '%' || $1 || '%')`, key).Scan(&holding))
	require.Zero(t, holding, "no row holds the key")
}
