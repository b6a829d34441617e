package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/testkit/dbtest"
)

const adminKey = "console-admin-key-0123456789abcdefghij"

const testEncryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// node is a dev-mode rebill node on a database of its own, served
// without the OpenAPI checker (the console is not part of the JSON API).
type node struct {
	pool *pgxpool.Pool
	url  string
	keys *apikeys.Store
}

func startNode(t *testing.T) node {
	t.Helper()
	return startNodeWith(t, nil)
}

// startNodeWith starts a node with more settings (over the defaults).
func startNodeWith(t *testing.T, more map[string]string) node {
	t.Helper()
	pool := dbtest.Pool(t)
	env := map[string]string{
		"REBILL_DEV": "1", "REBILL_ADMIN_KEY": adminKey, "REBILL_GATEWAY_TIMEOUT": "400ms", "REBILL_RETRY_BASE": "50ms",
		"REBILL_RETRY_MAX": "300ms", "REBILL_SCAN_INTERVAL": "200ms", "REBILL_RESCUE_AFTER": "15s", "REBILL_LOG_LEVEL": "warn",
		"REBILL_DB_MAX_CONNS": "10", "REBILL_ENCRYPTION_KEY": testEncryptionKey,
	}
	for k, v := range more {
		env[k] = v
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	ctx := context.Background()
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(io.Discard))
	require.NoError(t, err)
	require.NoError(t, svc.River.Start(ctx))
	server := httptest.NewServer(svc.Handler)
	t.Cleanup(func() {
		server.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
		svc.Close()
	})
	return node{pool: pool, url: server.URL, keys: apikeys.NewStore(pool, adminKey)}
}

// api calls the JSON API with the admin key.
func (n node) api(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, n.url+path, reader)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", time.Now().UnixNano()))
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Less(t, res.StatusCode, 300, "%s %s: %v", method, path, out)
	return out
}

func (n node) newKey(t *testing.T, role, customer string) (secret, id string) {
	t.Helper()
	k, err := n.keys.CreateWithPool(context.Background(), role, customer)
	require.NoError(t, err)
	return k.Secret, k.ID
}

func (n node) createSubscription(t *testing.T, customer string) string {
	t.Helper()
	return n.api(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": customer, "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
}

// browser is a console user: a cookie jar that does not follow redirects.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: base, client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values, header map[string]string) response {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	return response{status: res.StatusCode, header: res.Header, body: string(data)}
}

func (b *browser) get(path string) response { return b.do(http.MethodGet, path, nil, nil) }

func (b *browser) post(path string, form url.Values) response {
	return b.do(http.MethodPost, path, form, nil)
}

// login logs in with key and requires it to work.
func (b *browser) login(key string) {
	b.t.Helper()
	res := b.post("/console/login", url.Values{"api_key": {key}})
	require.Equal(b.t, http.StatusSeeOther, res.status, res.body)
	require.Equal(b.t, "/console/", res.header.Get("Location"))
}

func (b *browser) cookie() *http.Cookie {
	u, _ := url.Parse(b.base + "/console/")
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == console.CookieName {
			return c
		}
	}
	return nil
}

var (
	formRE   = regexp.MustCompile(`(?s)<form method="post" action="([^"]+)"[^>]*>(.*?)</form>`)
	inputRE  = regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`)
	buttonRE = regexp.MustCompile(`<button type="submit"[^>]*>([^<]+)</button>`)
)

// form finds the POST form on a page whose button says label and returns
// its action and hidden fields.
func form(t *testing.T, page, label string) (string, url.Values) {
	t.Helper()
	for _, m := range formRE.FindAllStringSubmatch(page, -1) {
		bm := buttonRE.FindStringSubmatch(m[2])
		if bm == nil || html.UnescapeString(bm[1]) != label {
			continue
		}
		values := url.Values{}
		for _, in := range inputRE.FindAllStringSubmatch(m[2], -1) {
			values.Set(in[1], html.UnescapeString(in[2]))
		}
		return html.UnescapeString(m[1]), values
	}
	t.Fatalf("no form with button %q on the page:\n%s", label, page)
	return "", nil
}

// count runs a count query.
func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// fakeClock is a settable session clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
