package console_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/testkit/dbtest"
)

// bare is a console alone over a database (no billing): enough for
// sessions, with a clock and a sleep the test controls.
type bare struct {
	pool   *pgxpool.Pool
	keys   *apikeys.Store
	clock  *fakeClock
	server *httptest.Server
	mu     sync.Mutex
	slept  []time.Duration
}

func startBare(t *testing.T, trustProxy bool) *bare {
	t.Helper()
	pool := dbtest.Pool(t)
	b := &bare{pool: pool, keys: apikeys.NewStore(pool, adminKey),
		clock: &fakeClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}}
	h := console.New(console.Options{Pool: pool, Keys: b.keys, Now: b.clock.Now, TrustProxy: trustProxy,
		Sleep: func(_ context.Context, d time.Duration) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.slept = append(b.slept, d)
			return nil
		}})
	b.server = httptest.NewServer(h)
	t.Cleanup(b.server.Close)
	return b
}

func (b *bare) key(t *testing.T, role, customer string) (string, string) {
	t.Helper()
	k, err := b.keys.CreateWithPool(context.Background(), role, customer)
	require.NoError(t, err)
	return k.Secret, k.ID
}

func TestLoginByRole(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, _ := b.key(t, "support", "")
	admin, _ := b.key(t, "admin", "")
	customer, _ := b.key(t, "customer", "cust-1")

	for _, key := range []string{support, admin, adminKey} {
		u := newBrowser(t, b.server.URL)
		u.login(key)
		home := u.get("/console/")
		require.Equal(t, http.StatusOK, home.status)
		require.Contains(t, home.body, `<label for="q">Search</label>`)
		require.Contains(t, home.body, "Log out")
	}

	u := newBrowser(t, b.server.URL)
	res := u.post("/console/login", url.Values{"api_key": {customer}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, res.body, "Customer keys cannot use the console")
	require.Nil(t, u.cookie(), "a customer key got a session")

	res = u.post("/console/login", url.Values{"api_key": {"rbk_not-a-key-at-all"}})
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Contains(t, res.body, "Unknown API key")
	require.Nil(t, u.cookie())
	require.NotContains(t, res.body, "rbk_not-a-key-at-all", "the typed key is echoed")

	require.Equal(t, http.StatusSeeOther, u.get("/console/").status, "no session, yet a page")
	require.Equal(t, 4-1, count(t, b.pool, `SELECT count(*) FROM console_sessions`))
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, _ := b.key(t, "support", "")

	login := func(header map[string]string, tlsOn bool) *http.Cookie {
		req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"api_key": {support}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if tlsOn {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		b.server.Config.Handler.ServeHTTP(rec, req)
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		cookies := rec.Result().Cookies()
		require.Len(t, cookies, 1)
		return cookies[0]
	}
	c := login(nil, false)
	require.Equal(t, console.CookieName, c.Name)
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/console/", c.Path)
	require.False(t, c.Secure, "plain HTTP cannot carry a Secure cookie")
	require.NotContains(t, c.Value, support)
	require.GreaterOrEqual(t, len(c.Value), 43, "a session id of 256 bits")

	require.True(t, login(nil, true).Secure, "over TLS the cookie is Secure")
	require.False(t, login(map[string]string{"X-Forwarded-Proto": "https"}, false).Secure,
		"X-Forwarded-Proto from a proxy nobody said to trust")

	trusting := startBare(t, true)
	trustedKey, _ := trusting.key(t, "support", "")
	req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"api_key": {trustedKey}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	rec := httptest.NewRecorder()
	trusting.server.Config.Handler.ServeHTTP(rec, req)
	require.True(t, rec.Result().Cookies()[0].Secure, "a trusted proxy said https")

	// Neither the key nor the session id is in the database: only hashes.
	var dump string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT string_agg(s::text, '|') FROM console_sessions s`).Scan(&dump))
	require.NotContains(t, dump, support)
	require.NotContains(t, dump, c.Value)
	require.NotContains(t, dump, strings.ToLower(c.Value))
}

func TestSessionIdleAndAbsoluteExpiry(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, _ := b.key(t, "support", "")

	u := newBrowser(t, b.server.URL)
	u.login(support)
	b.clock.advance(29 * time.Minute)
	require.Equal(t, http.StatusOK, u.get("/console/").status, "29 minutes idle is within 30")
	b.clock.advance(31 * time.Minute)
	res := u.get("/console/")
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, "/console/login?ended=1", res.header.Get("Location"))
	require.Contains(t, u.get("/console/login?ended=1").body, "Your session has ended")
	require.Equal(t, 0, count(t, b.pool, `SELECT count(*) FROM console_sessions`), "the ended session is deleted")

	// Busy all day: the session still ends 12 hours after login.
	u = newBrowser(t, b.server.URL)
	u.login(support)
	for elapsed := time.Duration(0); elapsed < 12*time.Hour-20*time.Minute; elapsed += 20 * time.Minute {
		b.clock.advance(20 * time.Minute)
		require.Equal(t, http.StatusOK, u.get("/console/").status, "after %s", elapsed)
	}
	b.clock.advance(21 * time.Minute)
	require.Equal(t, http.StatusSeeOther, u.get("/console/").status, "a session outlived 12 hours")
}

func TestRevokedKeyEndsItsSessions(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, supportID := b.key(t, "support", "")
	other, _ := b.key(t, "support", "")
	u, v := newBrowser(t, b.server.URL), newBrowser(t, b.server.URL)
	u.login(support)
	v.login(other)
	require.Equal(t, http.StatusOK, u.get("/console/").status)

	_, err := b.pool.Exec(context.Background(), `DELETE FROM api_keys WHERE id = $1`, supportID)
	require.NoError(t, err)
	res := u.get("/console/")
	require.Equal(t, http.StatusSeeOther, res.status, "a revoked key's session still works")
	require.Equal(t, "/console/login?ended=1", res.header.Get("Location"))
	require.Equal(t, http.StatusOK, v.get("/console/").status, "another key's session ended too")
	require.Equal(t, http.StatusUnauthorized, u.post("/console/login", url.Values{"api_key": {support}}).status)
}

func TestLogout(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, _ := b.key(t, "support", "")
	u := newBrowser(t, b.server.URL)
	u.login(support)
	stolen := *u.cookie()
	home := u.get("/console/")
	action, fields := form(t, home.body, "Log out")
	require.Equal(t, http.StatusForbidden, u.post(action, url.Values{}).status, "logout without its token")
	res := u.post(action, fields)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, 0, count(t, b.pool, `SELECT count(*) FROM console_sessions`))

	// The old cookie, replayed, opens nothing.
	thief := newBrowser(t, b.server.URL)
	base, _ := url.Parse(b.server.URL + "/console/")
	thief.client.Jar.SetCookies(base, []*http.Cookie{&stolen})
	require.Equal(t, http.StatusSeeOther, thief.get("/console/").status)
}

func TestFailedLoginsSlowDownWithoutLockout(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	support, _ := b.key(t, "support", "")
	u := newBrowser(t, b.server.URL)
	wrong := support[:8] + "wrongwrongwrongwrongwrong"
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, u.post("/console/login", url.Values{"api_key": {wrong}}).status)
	}
	b.mu.Lock()
	require.Equal(t, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}, b.slept)
	b.slept = nil
	b.mu.Unlock()

	// Another key prefix from the same address is not slowed.
	require.Equal(t, http.StatusUnauthorized, u.post("/console/login", url.Values{"api_key": {"rbk_ZZZZ-other"}}).status)
	b.mu.Lock()
	require.Empty(t, b.slept)
	b.mu.Unlock()

	// The right key with the slowed prefix waits, and gets in: no lockout.
	u.login(support)
	b.mu.Lock()
	require.Equal(t, []time.Duration{4 * time.Second}, b.slept)
	b.mu.Unlock()

	// Many more failures: the wait is capped.
	for range 20 {
		u.post("/console/login", url.Values{"api_key": {"rbk_YYYY-guess"}})
	}
	b.mu.Lock()
	require.Equal(t, 8*time.Second, b.slept[len(b.slept)-1])
	b.mu.Unlock()
}

func TestHeadersAndStatic(t *testing.T) {
	t.Parallel()
	b := startBare(t, false)
	u := newBrowser(t, b.server.URL)
	for _, path := range []string{"/console/login", "/console/static/console.css", "/console/nope"} {
		res := u.get(path)
		require.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			res.header.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
	}
	require.Equal(t, http.StatusOK, u.get("/console/static/console.css").status)
	res := u.get("/console")
	require.Equal(t, http.StatusMovedPermanently, res.status)
	require.Equal(t, "/console/", res.header.Get("Location"))
	login := u.get("/console/login").body
	require.Contains(t, login, `<label for="api_key">API key</label>`)
	require.Contains(t, login, `<input id="api_key" name="api_key" type="password"`)
	require.NotContains(t, login, "<script")
	require.NotContains(t, login, "style=", "inline styles break the CSP")

	// A login posted from another site is refused before the key is read.
	res = u.do(http.MethodPost, "/console/login", url.Values{"api_key": {adminKey}}, map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Nil(t, u.cookie())
}
