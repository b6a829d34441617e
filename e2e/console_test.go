package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console's session cookie, on a real node, opens the console only:
// the API and River UI still want a key.
func TestConsoleSessionIsNotAnAPICredential(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	support := b.newKey(t, "support", "")
	// The console is not part of the OpenAPI contract: its pages go to the
	// node without the checker.
	raw := httptest.NewServer(b.nodes[0].svc.Handler)
	t.Cleanup(raw.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(raw.URL+"/console/login", url.Values{"api_key": {support}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "rebill_console" {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	require.NotContains(t, cookie.Value, support)

	page, err := http.NewRequest(http.MethodGet, raw.URL+"/console/review", nil)
	require.NoError(t, err)
	page.AddCookie(cookie)
	res, err = client.Do(page)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "the cookie opens the console")

	for _, path := range []string{"/v1/subscriptions", "/v1/review-queue", "/riverui/"} {
		// River UI is outside the API document: ask the server directly.
		req, err := http.NewRequest(http.MethodGet, raw.URL+path, nil)
		require.NoError(t, err)
		req.AddCookie(cookie)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, path)
	}
	res, err = http.Get(raw.URL + "/console")
	require.NoError(t, err)
	res.Body.Close()
	require.True(t, strings.HasSuffix(res.Request.URL.Path, "/console/login"), "GET /console leads to the login page")
}
