package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
)

// newKey creates an API key through the API and returns its secret.
func (b testBundle) newKey(t *testing.T, role, customerID string) string {
	t.Helper()
	body := map[string]any{"role": role}
	if customerID != "" {
		body["customer_id"] = customerID
	}
	return b.call(t, http.MethodPost, "/v1/api-keys", body)["key"].(string)
}

type riverUIAuth func(*http.Request)

func bearer(key string) riverUIAuth {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }
}

func basic(key string) riverUIAuth {
	return func(r *http.Request) { r.SetBasicAuth("anyone", key) }
}

func riverUIRequest(t *testing.T, base, method, path, body string, auth riverUIAuth) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != nil {
		auth(req)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(out)
}

func TestRiverUIByRole(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	support, customer := b.newKey(t, "support", ""), b.newKey(t, "customer", "cust-ui")

	// River UI is not rebill's contract (the OpenAPI document leaves it
	// out): these calls go to the node's handler without the checker.
	ui := httptest.NewServer(b.nodes[0].svc.Handler)
	t.Cleanup(ui.Close)

	t.Run("entry", func(t *testing.T) {
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.Get(ui.URL + "/riverui")
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
		require.Equal(t, "/riverui/", res.Header.Get("Location"))
	})

	t.Run("page", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			auth riverUIAuth
			want int
		}{
			{"no key", nil, http.StatusUnauthorized},
			{"wrong key", basic("rbk_not-a-key"), http.StatusUnauthorized},
			{"customer bearer", bearer(customer), http.StatusForbidden},
			{"customer basic", basic(customer), http.StatusForbidden},
			{"support bearer", bearer(support), http.StatusOK},
			{"support basic", basic(support), http.StatusOK},
			{"admin basic", basic(adminKey), http.StatusOK},
		} {
			status, header, body := riverUIRequest(t, ui.URL, http.MethodGet, "/riverui/", "", tc.auth)
			require.Equal(t, tc.want, status, "%s: %s", tc.name, body)
			if status == http.StatusUnauthorized {
				require.Contains(t, header.Get("WWW-Authenticate"), "Basic", "a browser must be asked for the key")
			}
			if status == http.StatusOK {
				require.Contains(t, body, "<html", tc.name)
			}
		}
	})

	job, err := b.nodes[0].svc.River.Insert(t.Context(), idempotency.CleanupArgs{},
		&river.InsertOpts{ScheduledAt: time.Now().Add(2 * time.Hour)})
	require.NoError(t, err)
	cancel := fmt.Sprintf(`{"ids":["%d"]}`, job.Job.ID)
	state := func() string {
		row, err := b.nodes[0].svc.River.JobGet(t.Context(), job.Job.ID)
		require.NoError(t, err)
		return string(row.State)
	}

	t.Run("support reads the API but cannot act", func(t *testing.T) {
		status, _, body := riverUIRequest(t, ui.URL, http.MethodGet, "/riverui/api/jobs?state=scheduled", "", basic(support))
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, fmt.Sprint(job.Job.ID))
		for _, path := range []string{"/riverui/api/jobs/cancel", "/riverui/api/jobs/delete", "/riverui/api/jobs/retry"} {
			status, _, body = riverUIRequest(t, ui.URL, http.MethodPost, path, cancel, basic(support))
			require.Equal(t, http.StatusForbidden, status, "%s: %s", path, body)
		}
		status, _, _ = riverUIRequest(t, ui.URL, http.MethodDelete, "/riverui/api/jobs", "", bearer(support))
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, "scheduled", state(), "a refused request reached River")
	})

	t.Run("customer reads nothing", func(t *testing.T) {
		status, _, body := riverUIRequest(t, ui.URL, http.MethodGet, "/riverui/api/jobs", "", bearer(customer))
		require.Equal(t, http.StatusForbidden, status)
		require.NotContains(t, body, fmt.Sprint(job.Job.ID))
	})

	// What a page on another origin makes a browser send: a simple
	// request (text/plain needs no preflight) with the Basic credentials
	// the browser cached for River UI.
	crossSite := func(t *testing.T, method, path, body string, auth riverUIAuth, headers map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, ui.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		auth(req)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(out)
	}

	t.Run("another site cannot act with a browser's Basic credentials", func(t *testing.T) {
		for _, headers := range []map[string]string{
			{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
			{"Origin": "https://evil.example"},
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site", "Origin": "https://sub." + strings.TrimPrefix(ui.URL, "http://")},
			{"Origin": "null"},
		} {
			for _, path := range []string{"/riverui/api/jobs/retry", "/riverui/api/jobs/cancel", "/riverui/api/jobs/delete"} {
				status, body := crossSite(t, http.MethodPost, path, cancel, basic(adminKey), headers)
				require.Equal(t, http.StatusForbidden, status, "%s %v: %s", path, headers, body)
			}
			status, body := crossSite(t, http.MethodPut, "/riverui/api/queues/default/pause", "", basic(adminKey), headers)
			require.Equal(t, http.StatusForbidden, status, "pause %v: %s", headers, body)
		}
		require.Equal(t, "scheduled", state(), "a cross-site request reached River")
		// Reading stays possible from a link on another site.
		status, body := crossSite(t, http.MethodGet, "/riverui/api/jobs?state=scheduled", "", basic(adminKey),
			map[string]string{"Sec-Fetch-Site": "cross-site"})
		require.Equal(t, http.StatusOK, status, body)
	})

	t.Run("River UI's own page and scripts with a Bearer key act", func(t *testing.T) {
		for i, tc := range []struct {
			name    string
			auth    riverUIAuth
			headers map[string]string
		}{
			{"River UI's page", basic(adminKey), map[string]string{"Origin": ui.URL, "Sec-Fetch-Site": "same-origin"}},
			{"a script with Basic", basic(adminKey), nil},
			{"a Bearer key, whatever the headers", bearer(adminKey), map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}},
		} {
			// Each in its own minute: the kind is unique by minute.
			other, err := b.nodes[0].svc.River.Insert(t.Context(), idempotency.CleanupArgs{},
				&river.InsertOpts{ScheduledAt: time.Now().Add(3 * time.Hour).Add(time.Duration(i) * time.Hour)})
			require.NoError(t, err)
			require.False(t, other.UniqueSkippedAsDuplicate, tc.name)
			status, body := crossSite(t, http.MethodPost, "/riverui/api/jobs/cancel", fmt.Sprintf(`{"ids":["%d"]}`, other.Job.ID), tc.auth, tc.headers)
			require.Equal(t, http.StatusOK, status, "%s: %s", tc.name, body)
			row, err := b.nodes[0].svc.River.JobGet(t.Context(), other.Job.ID)
			require.NoError(t, err)
			require.Equal(t, "cancelled", string(row.State), tc.name)
		}
		require.Equal(t, "scheduled", state())
	})

	t.Run("no other site may frame River UI", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			auth riverUIAuth
		}{{"/riverui/", basic(adminKey)}, {"/riverui/jobs", basic(support)}, {"/riverui/", nil}} {
			_, header, _ := riverUIRequest(t, ui.URL, http.MethodGet, tc.path, "", tc.auth)
			require.Equal(t, "DENY", header.Get("X-Frame-Options"), tc.path)
			require.Contains(t, header.Get("Content-Security-Policy"), "frame-ancestors 'none'", tc.path)
		}
	})

	t.Run("admin acts", func(t *testing.T) {
		status, _, body := riverUIRequest(t, ui.URL, http.MethodPost, "/riverui/api/jobs/cancel", cancel, basic(adminKey))
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "cancelled", state())
	})
}
