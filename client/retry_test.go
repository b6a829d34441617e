package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/client"
)

// stub answers the i-th request with answers[i] (the last one repeated)
// and records every request's Idempotency-Key.
type stub struct {
	mu      sync.Mutex
	answers []func(http.ResponseWriter)
	keys    []string
	auth    []string
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := len(s.keys)
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	answer := s.answers[min(i, len(s.answers)-1)]
	s.mu.Unlock()
	answer(w)
}

func (s *stub) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func serve(t *testing.T, answers ...func(http.ResponseWriter)) (*stub, string) {
	s := &stub{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func problem(status int, slug string, headers ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"type":"https://rebill.dev/problems/` + slug + `","title":"t","status":` + strconv.Itoa(status) + `,"detail":"d"}`))
	}
}

func created(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d","role":"support"}`))
}

func retryPolicy(attempts int) client.Option {
	return client.Retries(client.RetryPolicy{MaxAttempts: attempts, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second})
}

// createKey makes one logical POST.
func createKey(t *testing.T, url string, opts ...client.Option) error {
	c := newClient(t, url, "k", opts...)
	res, err := c.CreateApiKeyWithResponse(context.Background(), nil, client.ApiKeyCreate{Role: client.RoleSupport})
	if err == nil && res.JSON201 == nil {
		t.Fatalf("201 not decoded: %s", res.Body)
	}
	return err
}

// 503 with Retry-After is retried after it, plus up to half again of
// jitter, with the call's one key; the next call has a new key.
func TestRetryAfter503(t *testing.T) {
	t.Parallel()
	s, url := serve(t, problem(503, "service-unavailable", "Retry-After", "2"), problem(503, "service-unavailable", "Retry-After", "2"), created)
	var waits []time.Duration
	require.NoError(t, createKey(t, url, client.Jitter(0.5), client.Sleeps(&waits)))
	require.Equal(t, []time.Duration{2500 * time.Millisecond, 2500 * time.Millisecond}, waits)
	keys := s.seen()
	require.Len(t, keys, 3)
	require.NotEmpty(t, keys[0])
	require.Equal(t, []string{keys[0], keys[0], keys[0]}, keys)
	require.Equal(t, "Bearer k", s.auth[0])

	s2, url2 := serve(t, created)
	c := newClient(t, url2, "k")
	for range 2 {
		_, err := c.CreateApiKeyWithResponse(context.Background(), nil, client.ApiKeyCreate{Role: client.RoleSupport})
		require.NoError(t, err)
	}
	keys = s2.seen()
	require.NotEqual(t, keys[0], keys[1], "a new key per logical call")
}

func TestWhatIsNotRetried(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]func(http.ResponseWriter){
		"503 without Retry-After":             problem(503, "service-unavailable"),
		"503 asking to wait past MaxDelay":    problem(503, "gateway-unavailable", "Retry-After", "3600"),
		"409 of another kind":                 problem(409, "invalid-transition", "Retry-After", "1"),
		"400":                                 problem(400, "validation-error"),
		"429, a limit that lasts":             problem(429, "velocity-limit", "Retry-After", "1"),
		"500, which may have done something":  problem(500, "internal-error"),
		"422, the key used for other request": problem(422, "idempotency-key-mismatch"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, url := serve(t, answer, created)
			var waits []time.Duration
			err := createKey(t, url, client.Sleeps(&waits))
			var p *client.Problem
			require.ErrorAs(t, err, &p)
			require.Len(t, s.seen(), 1)
			require.Empty(t, waits)
		})
	}
}

// However often the node says "in progress", the call ends after
// MaxAttempts with that problem.
func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	s, url := serve(t, problem(409, "idempotency-key-in-use", "Retry-After", "1"))
	var waits []time.Duration
	err := createKey(t, url, retryPolicy(3), client.Jitter(0), client.Sleeps(&waits))
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, client.ProblemIdempotencyKeyInUse, p.Slug())
	require.Len(t, s.seen(), 3)
	require.Equal(t, []time.Duration{time.Second, time.Second}, waits)
}

// A lost answer (the connection closed) is retried with backoff: doubling,
// capped, the upper half drawn at random.
func TestLostAnswerBackoff(t *testing.T) {
	t.Parallel()
	hangUp := func(w http.ResponseWriter) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	s, url := serve(t, hangUp, hangUp, hangUp, hangUp, created)
	var waits []time.Duration
	policy := client.Retries(client.RetryPolicy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 300 * time.Millisecond})
	require.NoError(t, createKey(t, url, policy, client.Jitter(1), client.Sleeps(&waits)))
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}, waits)
	keys := s.seen()
	require.Len(t, keys, 5)
	for _, k := range keys {
		require.Equal(t, keys[0], k)
	}

	waits = nil
	_, url = serve(t, hangUp, created)
	require.NoError(t, createKey(t, url, policy, client.Jitter(0), client.Sleeps(&waits)))
	require.Equal(t, []time.Duration{50 * time.Millisecond}, waits, "at least half the backoff")

	_, url = serve(t, hangUp)
	err := createKey(t, url, retryPolicy(2), client.Sleeps(new([]time.Duration)))
	require.Error(t, err)
	var p *client.Problem
	require.False(t, errors.As(err, &p), "no answer is not a problem")
}

// The caller's own key is kept, on every attempt.
func TestCallerKeyKept(t *testing.T) {
	t.Parallel()
	s, url := serve(t, problem(503, "service-unavailable", "Retry-After", "0"), created)
	c := newClient(t, url, "k")
	_, err := c.CreateApiKeyWithResponse(context.Background(), &client.CreateApiKeyParams{IdempotencyKey: "mine-1"}, client.ApiKeyCreate{Role: client.RoleSupport})
	require.NoError(t, err)
	require.Equal(t, []string{"mine-1", "mine-1"}, s.seen())
}

// An error page that is not problem JSON (a proxy's) is a Problem of its
// status, without its body.
func TestErrorPageWithoutProblem(t *testing.T) {
	t.Parallel()
	_, url := serve(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<h1>upstream said secret-stuff</h1>"))
	})
	err := createKey(t, url)
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusBadGateway, p.Status)
	require.Equal(t, "about:blank", p.Type)
	require.NotContains(t, err.Error(), "secret-stuff")
}

// A cancelled context ends the wait for a retry at once.
func TestContextEndsTheWait(t *testing.T) {
	t.Parallel()
	_, url := serve(t, problem(503, "service-unavailable", "Retry-After", "5"))
	c := newClient(t, url, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.CreateApiKeyWithResponse(ctx, nil, client.ApiKeyCreate{Role: client.RoleSupport})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 3*time.Second)
}

func TestNoAPIKey(t *testing.T) {
	t.Parallel()
	_, err := client.New("http://127.0.0.1:1", "")
	require.Error(t, err)
}
