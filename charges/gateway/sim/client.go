package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// defaultTimeout bounds a call when ClientOptions.Timeout is zero.
const defaultTimeout = 5 * time.Second

// ClientOptions tune a [Client].
type ClientOptions struct {
	// Timeout bounds each call; past it the outcome is unknown. Default 5s.
	Timeout time.Duration
	// HTTPClient sends the requests. Nil means a client whose transport
	// keeps enough idle connections for many concurrent calls.
	HTTPClient *http.Client
}

// Client is a [gateway.Gateway] that calls one gateway of a sim server over
// HTTP.
//
// Errors follow the gateway contract: a 503, or a request that never left
// (connection refused), wraps [gateway.ErrUnavailable]; a call that may
// have been processed (timeout, connection dropped after sending, 5xx other
// than 503) wraps [gateway.ErrUnknownOutcome]. Declines and failures are
// Results. Errors never contain the token.
type Client struct {
	name    string
	baseURL string
	timeout time.Duration
	http    *http.Client
}

var _ gateway.Gateway = (*Client)(nil)

// NewClient returns the gateway name served at baseURL, the server's root
// followed by the gateway's prefix, e.g. "http://127.0.0.1:8089/sim1".
func NewClient(name, baseURL string, opts ClientOptions) *Client {
	c := &Client{
		name:    name,
		baseURL: strings.TrimRight(baseURL, "/"),
		timeout: opts.Timeout,
		http:    opts.HTTPClient,
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if c.http == nil {
		c.http = &http.Client{Transport: gateway.Transport()}
	}
	return c
}

// Name returns the configured gateway name.
func (c *Client) Name() string { return c.name }

// Authorize places a hold on req.Token for req.Amount.
func (c *Client) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return c.operate(ctx, gateway.OpAuthorize, req)
}

// Capture collects the hold named by req.AuthorizationID; req.Amount and
// req.Currency must match it.
func (c *Client) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return c.operate(ctx, gateway.OpCapture, req)
}

// Void releases the hold named by req.AuthorizationID.
func (c *Client) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return c.operate(ctx, gateway.OpVoid, req)
}

// Refund returns req.Amount of the payment captured under the hold named
// by req.AuthorizationID.
// req.Amount and req.Currency must be within what the capture left;
// several refunds of one payment are allowed, each under its own key.
func (c *Client) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return c.operate(ctx, gateway.OpRefund, req)
}

func (c *Client) operate(ctx context.Context, op gateway.Op, req gateway.Request) (gateway.Result, error) {
	b := opBody{
		Token:           req.Token,
		Amount:          req.Amount,
		Currency:        req.Currency,
		ChargeKey:       req.ChargeKey,
		AuthorizationID: req.AuthorizationID,
	}
	var err error
	if req.Receipt != nil {
		if b.Receipt, err = json.Marshal(req.Receipt); err != nil {
			return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: encode receipt: %w", c.name, op, req.IdempotencyKey, err)
		}
	}
	body, err := json.Marshal(b)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: encode request: %w", c.name, op, req.IdempotencyKey, err)
	}
	var out resultBody
	err = c.call(ctx, http.MethodPost, "/"+string(op), req.IdempotencyKey, body, &out)
	if ae := (*answerError)(nil); errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == codeKeyReused {
		return c.keyReused(ctx, op, req)
	}
	if err != nil {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: %w", c.name, op, req.IdempotencyKey, err)
	}
	return out.result(), nil
}

// keyReused answers a call the simulator refused because its key's first
// request had other parameters, as a replay after a database restore does
// when the restored charge asks with another card: the key's operation,
// looked up by the key, is what the key did, and is the answer when it is
// the same operation on the same hold for the same money. Otherwise the
// key moved other money than this call asks, which a person must settle:
// an error, never an unknown outcome that would resend under the key.
func (c *Client) keyReused(ctx context.Context, op gateway.Op, req gateway.Request) (gateway.Result, error) {
	found, err := c.Lookup(ctx, gateway.LookupRequest{Op: op, Request: req})
	if err != nil {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: key first used with other parameters, and its look-up failed: %w",
			c.name, op, req.IdempotencyKey, err)
	}
	// A void records its hold's amount, whatever the call said.
	if found.Op != op || (op != gateway.OpVoid && (found.Amount != req.Amount || found.Currency != req.Currency)) {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: the key's operation is a %s of %d %s, not this call's %d %s: %w",
			c.name, op, req.IdempotencyKey, found.Op, found.Amount, found.Currency, req.Amount, req.Currency, gateway.ErrKeyReused)
	}
	return found, nil
}

// Lookup reports the operation sent with req's idempotency key: the
// simulator indexes every operation by it, for ever. Returns
// gateway.ErrNotFound when the gateway never processed it.
func (c *Client) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	idempotencyKey := req.Request.IdempotencyKey
	var out resultBody
	err := c.call(ctx, http.MethodGet, "/operations/"+url.PathEscape(idempotencyKey), "", nil, &out)
	if ae := (*answerError)(nil); errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == codeOperationNotFound {
		err = gateway.ErrNotFound
	}
	if err != nil {
		return gateway.Result{}, fmt.Errorf("gateway %s: look up %q: %w", c.name, idempotencyKey, err)
	}
	return out.result(), nil
}

// Operations lists the operations processed on the UTC day containing day,
// oldest first.
func (c *Client) Operations(ctx context.Context, day time.Time) ([]gateway.Result, error) {
	date := day.UTC().Format(time.DateOnly)
	var out listBody[resultBody]
	if err := c.call(ctx, http.MethodGet, "/operations?day="+date, "", nil, &out); err != nil {
		return nil, fmt.Errorf("gateway %s: list operations of %s: %w", c.name, date, err)
	}
	results := make([]gateway.Result, len(out.Data))
	for i, b := range out.Data {
		results[i] = b.result()
	}
	return results, nil
}

// Health probes GET {base URL}/health once. It returns nil when the
// gateway answers 200; an error wrapping [gateway.ErrUnavailable] when it
// answers 503 (it is there but down); any other error when nothing answers
// or the answer is anything else, such as the 404 of a URL that names no
// gateway of the server. Errors name the gateway and the URL (credentials
// redacted).
func (c *Client) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/health", nil)
	if err != nil {
		return fmt.Errorf("gateway %s: health probe: %w", c.name, err)
	}
	where := req.URL.Redacted()
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("gateway %s: no answer from %s: %w", c.name, where, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusServiceUnavailable:
		return fmt.Errorf("gateway %s: %s answered %s: %w", c.name, where, resp.Status, gateway.ErrUnavailable)
	}
	return fmt.Errorf("gateway %s: %s answered %s %s, want 200 (the base URL is the simulator's root followed by the gateway's name, e.g. http://127.0.0.1:8090/sim1)",
		c.name, where, resp.Status, errorCode(resp))
}

// SetFaults changes the gateway's fault switches set in p, as the dev
// endpoint does, for tools (benchmarks, soaks) that drive a simulator
// they did not start in-process.
func (c *Client) SetFaults(ctx context.Context, p FaultsPatch) (Faults, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return Faults{}, err
	}
	var f Faults
	if err := c.call(ctx, http.MethodPost, "/faults", "", body, &f); err != nil {
		return Faults{}, fmt.Errorf("gateway %s: set faults: %w", c.name, err)
	}
	return f, nil
}

// answerError is an answer that is neither a result nor a sign of trouble
// at the provider: the request itself was refused (400, 404, 409).
type answerError struct {
	Status int
	Code   string
}

func (e *answerError) Error() string {
	return fmt.Sprintf("refused with %d %s", e.Status, e.Code)
}

// call sends one request and decodes a 200 answer into out, classifying
// every other outcome by whether the gateway may have acted on it.
func (c *Client) call(ctx context.Context, method, path, key string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	// Whether any attempt got its request out decides between "did nothing"
	// and "may have done it" when no answer comes back.
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { sent.Store(true) },
	})
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, reader)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(idempotencyHeader, key)
	}

	resp, err := c.http.Do(req)
	if err != nil {
		if !sent.Load() {
			return fmt.Errorf("%w: request not sent: %w", gateway.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: %w", gateway.ErrUnknownOutcome, err)
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusOK:
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%w: read answer: %w", gateway.ErrUnknownOutcome, err)
		}
		return nil
	case resp.StatusCode == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: answered %s %s", gateway.ErrUnavailable, resp.Status, errorCode(resp))
	case resp.StatusCode >= 500:
		// A 502 or 504 comes from a proxy that may have handed the request
		// on, and a 500 may follow a commit: none says nothing was done.
		return fmt.Errorf("%w: answered %s %s", gateway.ErrUnknownOutcome, resp.Status, errorCode(resp))
	default:
		return &answerError{Status: resp.StatusCode, Code: errorCode(resp)}
	}
}

// errorCode reads the sim's error code from an error answer. The message
// is left out of errors: a proxy's error page could echo anything.
func errorCode(resp *http.Response) string {
	var e errorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&e); err != nil || e.Error == "" {
		return "(no error code)"
	}
	return e.Error
}
