package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Client is the generated ClientWithResponses (every operation, as
// <Operation>WithResponse) behind rebill's conventions; see the package
// documentation. It is safe for concurrent use.
type Client struct {
	*ClientWithResponses
}

// RetryPolicy bounds the retries of one call.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: 1 never retries.
	MaxAttempts int
	// BaseDelay is the first wait after a lost answer (a transport error);
	// it doubles with each retry up to MaxDelay.
	BaseDelay time.Duration
	// MaxDelay is the longest single wait. A Retry-After longer than it is
	// not waited for: the call returns the 503 at once, for the caller to
	// decide.
	MaxDelay time.Duration
}

// DefaultRetryPolicy waits at most 4 times about a second in total for an
// in-flight first attempt, and rides out a node restart.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second}

// Option configures New.
type Option func(*settings)

type settings struct {
	httpClient *http.Client
	retry      RetryPolicy
	newKey     func() string
	jitter     func() float64
	sleep      func(context.Context, time.Duration) error
}

// HTTPClient sends the requests through h (its Transport, Timeout,
// proxies); http.DefaultClient otherwise.
func HTTPClient(h *http.Client) Option { return func(s *settings) { s.httpClient = h } }

// Retries replaces DefaultRetryPolicy.
func Retries(p RetryPolicy) Option { return func(s *settings) { s.retry = p } }

// IdempotencyKeys makes the key of a POST that the caller gave none
// (a random UUID otherwise). A key must be new for every logical call.
func IdempotencyKeys(newKey func() string) Option { return func(s *settings) { s.newKey = newKey } }

// New is a client of the rebill API at server (`https://billing.example`,
// without /v1) that authenticates with apiKey.
func New(server, apiKey string, opts ...Option) (*Client, error) {
	s := settings{
		httpClient: http.DefaultClient,
		retry:      DefaultRetryPolicy,
		newKey:     func() string { return uuid.NewString() },
		jitter:     rand.Float64,
		sleep:      sleepCtx,
	}
	for _, o := range opts {
		o(&s)
	}
	if s.retry.MaxAttempts < 1 {
		s.retry.MaxAttempts = 1
	}
	if apiKey == "" {
		return nil, errors.New("rebill client: no API key")
	}
	c, err := NewClientWithResponses(server, WithHTTPClient(&doer{settings: s, auth: "Bearer " + apiKey}))
	if err != nil {
		return nil, fmt.Errorf("rebill client: %w", err)
	}
	return &Client{ClientWithResponses: c}, nil
}

// doer is the HttpRequestDoer under the generated client: every request
// of every operation passes here, so the conventions hold for all of them,
// including operations added to the document later.
type doer struct {
	settings
	auth string
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 1 << 20

func (d *doer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	req = req.Clone(ctx)
	req.Header.Set("Authorization", d.auth)
	if req.Method == http.MethodPost && req.Header.Get("Idempotency-Key") == "" {
		// One key per logical call, made before the first attempt: every
		// retry below sends the same one.
		req.Header.Set("Idempotency-Key", d.newKey())
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.Body != nil {
			if req.GetBody == nil {
				return nil, errors.New("rebill client: the request body cannot be sent again")
			}
			body, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("rebill client: rewind the request body: %w", err)
			}
			req.Body = body
		}
		res, err := d.httpClient.Do(req)
		var problem *Problem
		var errBody []byte
		if err == nil && res.StatusCode >= 400 {
			errBody, err = readAll(res)
			if err == nil {
				problem = problemOf(res, errBody)
			}
		}
		wait, again := d.retryAfter(ctx, attempt, res, problem, err)
		if !again {
			switch {
			case err != nil:
				return nil, fmt.Errorf("rebill client: %s %s: %w", req.Method, req.URL.Path, err)
			case problem != nil:
				return nil, problem
			}
			return res, nil
		}
		if err := d.sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("rebill client: %s %s: waiting to retry: %w", req.Method, req.URL.Path, err)
		}
	}
}

func readAll(res *http.Response) ([]byte, error) {
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	if err != nil {
		return nil, fmt.Errorf("read the %d answer: %w", res.StatusCode, err)
	}
	return body, nil
}

// problemOf reads an error answer. One that is not problem JSON (a proxy's
// page) becomes an about:blank problem of its status, as RFC 9457 reads an
// answer without details; its body is not kept, it could echo anything.
func problemOf(res *http.Response, body []byte) *Problem {
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p Problem
		if json.Unmarshal(body, &p) == nil && p.Type != "" {
			if p.Status == 0 {
				p.Status = res.StatusCode
			}
			return &p
		}
	}
	return &Problem{Type: "about:blank", Title: http.StatusText(res.StatusCode), Status: res.StatusCode}
}

// retryAfter decides whether to try again and after how long. Only answers
// that say nothing was done are retried: the first attempt of the same key
// still running (409 idempotency-key-in-use), an overloaded or restarting
// node (503 with Retry-After), and an answer that never came (the
// Idempotency-Key makes sending a POST again safe: the server replays the
// first outcome).
func (d *doer) retryAfter(ctx context.Context, attempt int, res *http.Response, p *Problem, err error) (time.Duration, bool) {
	if attempt >= d.retry.MaxAttempts || ctx.Err() != nil {
		return 0, false
	}
	if err != nil {
		return d.backoff(attempt), true
	}
	if p == nil {
		return 0, false
	}
	ra, hasRA := parseRetryAfter(res.Header.Get("Retry-After"))
	switch {
	case p.Status == http.StatusConflict && p.Slug() == ProblemIdempotencyKeyInUse:
		if !hasRA {
			return d.backoff(attempt), true
		}
	case p.Status == http.StatusServiceUnavailable && hasRA:
	default:
		return 0, false
	}
	if ra > d.retry.MaxDelay {
		return 0, false
	}
	// Up to half again on top, so that clients told the same Retry-After
	// do not all come back in the same instant.
	return ra + time.Duration(d.jitter()*float64(ra)/2), true
}

// backoff is the wait before retry n of a lost answer: BaseDelay doubled
// per retry, capped at MaxDelay, the upper half of it drawn at random.
func (d *doer) backoff(attempt int) time.Duration {
	w := d.retry.BaseDelay
	for i := 1; i < attempt && w < d.retry.MaxDelay; i++ {
		w *= 2
	}
	w = min(w, d.retry.MaxDelay)
	return w/2 + time.Duration(d.jitter()*float64(w/2))
}

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 10.2.3).
func parseRetryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// unexpected is the error of a 2xx answer the document does not describe
// (another content type), which leaves the typed body nil.
func unexpected(res *http.Response, body []byte) error {
	return fmt.Errorf("rebill client: unexpected %d answer (%s, %d bytes)", res.StatusCode, res.Header.Get("Content-Type"), len(bytes.TrimSpace(body)))
}
