package yookassa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

func (g *Gateway) wrap(op gateway.Op, key string, err error) error {
	return fmt.Errorf("gateway %s: %s %q: %w", g.name, op, key, err)
}

// apiError is a request YooKassa refused: it did nothing (4xx other than
// 401, 403 and 429).
type apiError struct {
	Status    int
	Code      string
	Parameter string
}

func (e *apiError) Error() string {
	if e.Parameter != "" {
		return fmt.Sprintf("refused with %d %s (parameter %s)", e.Status, e.Code, e.Parameter)
	}
	return fmt.Sprintf("refused with %d %s", e.Status, e.Code)
}

// call sends one request, and sends it again with the same key while
// YooKassa answers 202 (still processing), and decodes the 200 answer
// into out. Every other outcome is classified by whether YooKassa may
// have acted; see the package doc.
func (g *Gateway) call(ctx context.Context, method, path, key string, body any, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	for {
		retryAfter, err := g.send(ctx, method, path, key, payload, out)
		if err != nil || retryAfter == 0 {
			return err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < retryAfter {
			return fmt.Errorf("%w: still processing, and %s to wait is past the deadline", gateway.ErrUnknownOutcome, retryAfter)
		}
		if err := sleep(ctx, retryAfter); err != nil {
			return fmt.Errorf("%w: still processing: %w", gateway.ErrUnknownOutcome, err)
		}
	}
}

// send makes one HTTP exchange. A 202 returns how long to wait.
func (g *Gateway) send(ctx context.Context, method, path, key string, payload []byte, out any) (time.Duration, error) {
	// Whether the request got out decides between "did nothing" and
	// "may have done it" when no answer comes back.
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	var reader io.Reader
	if payload != nil {
		reader = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.baseURL+path, reader)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.SetBasicAuth(g.shopID, g.secret)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotence-Key", IdempotenceKey(key))
	}
	resp, err := g.http.Do(req)
	if err != nil {
		if !sent.Load() {
			return 0, fmt.Errorf("%w: request not sent: %w", gateway.ErrUnavailable, err)
		}
		return 0, fmt.Errorf("%w: %w", gateway.ErrUnknownOutcome, err)
	}
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out); err != nil {
			return 0, fmt.Errorf("%w: read answer: %w", gateway.ErrUnknownOutcome, err)
		}
		return 0, nil
	case code == http.StatusAccepted:
		if ms := readError(resp).RetryAfter; ms > 0 {
			return time.Duration(ms) * time.Millisecond, nil
		}
		return time.Second, nil
	case code == http.StatusServiceUnavailable, code == http.StatusTooManyRequests:
		return 0, fmt.Errorf("%w: answered %s %s", gateway.ErrUnavailable, resp.Status, readError(resp).Code)
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		// Refused before anything was done, for a reason of rebill's
		// configuration, not of the charge: the charge waits.
		return 0, fmt.Errorf("%w: answered %s %s: check the shop id and secret key", gateway.ErrUnavailable, resp.Status, readError(resp).Code)
	case code >= 500:
		// 500 is "result unknown" by YooKassa's own rules; a 502 or 504
		// comes from a proxy that may have handed the request on.
		return 0, fmt.Errorf("%w: answered %s %s", gateway.ErrUnknownOutcome, resp.Status, readError(resp).Code)
	default:
		e := readError(resp)
		return 0, &apiError{Status: code, Code: e.Code, Parameter: e.Parameter}
	}
}

// readError reads an error or processing answer. Its description is left
// out of errors: it could echo what the request carried.
func readError(resp *http.Response) apiErrorBody {
	var e apiErrorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<10)).Decode(&e); err != nil || e.Code == "" {
		e.Code = "(no error code)"
	}
	return e
}

// sleep waits d of real time (network waits are not business time) or
// until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
