package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"riverqueue.com/riverui"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/testkit/dbtest"
)

// riverUIServer serves the real River UI behind rebill's guard. River UI
// is outside the OpenAPI document, so its exchanges are not checked
// against it.
func riverUIServer(t *testing.T) *httptest.Server {
	t.Helper()
	pool := dbtest.Pool(t)
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    slog.New(slog.DiscardHandler),
		Prefix:    "/riverui",
	})
	require.NoError(t, err)
	srv := api.NewServer(api.Deps{Keys: apikeys.NewStore(pool, adminKey), Ready: pool.Ping, Logger: zerolog.Nop(), RiverUI: ui})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

// noRedirects sees the redirect itself rather than where it leads.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func riverUIGet(t *testing.T, client *http.Client, method, url string, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	if key != "" {
		req.SetBasicAuth("staff", key)
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(body)
}

// /riverui, as people type it, leads to River UI's page at /riverui/,
// before any key is asked for; a browser following it then gets the page.
func TestRiverUIRedirectsToItsPage(t *testing.T) {
	t.Parallel()
	ts := riverUIServer(t)

	for _, tc := range []struct{ method, path, location string }{
		{http.MethodGet, "/riverui", "/riverui/"},
		{http.MethodHead, "/riverui", "/riverui/"},
		{http.MethodGet, "/riverui?state=retryable", "/riverui/?state=retryable"},
	} {
		res, body := riverUIGet(t, noRedirects, tc.method, ts.URL+tc.path, "")
		require.Equal(t, http.StatusMovedPermanently, res.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.location, res.Header.Get("Location"), "%s %s", tc.method, tc.path)
		require.Empty(t, body)
	}

	res, _ := riverUIGet(t, noRedirects, http.MethodPost, ts.URL+"/riverui", adminKey)
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "only GET and HEAD are redirected")

	res, body := riverUIGet(t, http.DefaultClient, http.MethodGet, ts.URL+"/riverui", adminKey)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "/riverui/", res.Request.URL.Path)
	require.Contains(t, body, "<html")

	res, _ = riverUIGet(t, http.DefaultClient, http.MethodGet, ts.URL+"/riverui", "")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the page behind the redirect still asks for a key")
}

// River UI's icons reach a browser with their own content type (River UI
// guesses its SVG icon's type from its bytes: text/plain), while its page,
// served for any path it does not know, stays HTML even at a path that
// ends like an icon.
func TestRiverUIServesIconsWithTheirContentType(t *testing.T) {
	t.Parallel()
	ts := riverUIServer(t)

	for path, want := range map[string]string{
		"/riverui/icon.svg":       "image/svg+xml",
		"/riverui/favicon.ico":    "image/x-icon",
		"/riverui/apple-icon.png": "image/png",
		"/riverui/robots.txt":     "text/plain; charset=utf-8",
		"/riverui/":               "text/html; charset=utf-8",
		"/riverui/jobs":           "text/html; charset=utf-8",
		"/riverui/missing.svg":    "text/html; charset=utf-8",
	} {
		res, body := riverUIGet(t, http.DefaultClient, http.MethodGet, ts.URL+path, adminKey)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Equal(t, []string{want}, res.Header.Values("Content-Type"), path)
		require.NotEmpty(t, body, path)
	}

	res, body := riverUIGet(t, http.DefaultClient, http.MethodGet, ts.URL+"/riverui/icon.svg", adminKey)
	require.Contains(t, body, "<svg", "the icon itself is served")
	require.Equal(t, http.StatusOK, res.StatusCode)

	res, _ = riverUIGet(t, http.DefaultClient, http.MethodGet, ts.URL+"/riverui/icon.svg", "")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the icons are behind the key like the page")
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
}
