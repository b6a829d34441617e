// Package agentapi is a registry gateway (registry.Gateway) over HTTP: the
// API of a bank or payment agent that posts payments to the state payment
// registry (GIS GMP) on rebill's behalf. The protocol is docs/registry.md's;
// package agentfake plays the other side in tests.
//
// # Outcomes
//
// What an answer means to rebill is decided in one place, classify:
// a call refused before the party could act (no connection, a TLS
// handshake the party refused, 429, 503, a credential or path it does not
// know) did nothing (registry.ErrUnavailable); 202 is taken but not yet
// accepted (*registry.PendingError); a post answered annulled (a replay of
// a payment annulled since) is no acceptance (registry.ErrAnnulled); 400,
// 409 and 422 with the party's error body are refusals for good
// (registry.ErrRejected); a write whose answer may have been lost after the
// request was sent (a timeout, a dropped connection, another 5xx) has an
// unknown outcome (registry.ErrUnknownOutcome).
// A read that fails did nothing. The export of a day's payments is
// optional: a 404 to it is a party without one
// (registry.ErrExportUnsupported), not a base URL to fix.
package agentapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebill/rebill/charges/registry"
)

// Options configure a Client.
type Options struct {
	Name string
	// BaseURL is the party's API root; the endpoints are below it.
	BaseURL string
	// TLS is the client's TLS settings (platform/mtls: the client
	// certificate and the party's CA); nil: the system's trust store.
	TLS *tls.Config
	// BearerToken, when set, is sent as Authorization: Bearer.
	BearerToken string
	// Now reads the clock for Retry-After given as a date; nil: time.Now.
	Now func() time.Time
	// OnCertificateError, when set, is told of a call stopped in the TLS
	// handshake over a certificate (the party refused rebill's client
	// certificate, or rebill could not verify the party's), at most once
	// a minute: such a call did nothing, and every posting through the
	// entry waits until a person fixes the files.
	OnCertificateError func(err error)
}

// Client is one registry gateway over HTTP. Its calls are bounded by the
// caller's context (registry.Balancer gives each the entry's timeout).
type Client struct {
	name  string
	base  string
	token string
	http  *http.Client
	now   func() time.Time

	onCertificateError func(error)
	certWarnedAt       atomic.Int64 // Unix nanoseconds of the last call of onCertificateError
}

// New returns the client of o.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("registry %s: base URL: want an absolute https URL", o.Name)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if o.TLS != nil {
		transport.TLSClientConfig = o.TLS.Clone()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Client{name: o.Name, base: strings.TrimRight(o.BaseURL, "/"), token: o.BearerToken,
		http: &http.Client{Transport: transport, CheckRedirect: noRedirects}, now: now, onCertificateError: o.OnCertificateError}, nil
}

// noRedirects keeps a redirect from sending a payment, and the bearer
// token, somewhere the configuration does not name.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Name is the entry's name.
func (c *Client) Name() string { return c.name }

// paymentRequest is an import of a payment.
type paymentRequest struct {
	PaymentID   string `json:"payment_id"`
	UIN         string `json:"uin"`
	Amount      int64  `json:"amount"`
	PaymentDate string `json:"payment_date,omitempty"`
}

// paymentStatus is the party's answer about one payment.
type paymentStatus struct {
	PaymentID string `json:"payment_id"`
	Status    string `json:"status"`
}

// The statuses of a payment in the protocol.
const (
	statusAccepted   = "accepted"
	statusAnnulled   = "annulled"
	statusProcessing = "processing"
	statusNotFound   = "not_found"
)

type quittanceAnswer struct {
	UIN      string `json:"uin"`
	Settled  bool   `json:"settled"`
	Payments []struct {
		PaymentID string `json:"payment_id"`
		Amount    int64  `json:"amount"`
		Annulled  bool   `json:"annulled"`
	} `json:"payments"`
}

// moscow is the zone of a payment's date at the registry (see
// registry.PaymentIDs).
var moscow = time.FixedZone("MSK", 3*60*60)

// Post imports p: POST /payments.
func (c *Client) Post(ctx context.Context, p registry.Payment) error {
	req := paymentRequest{PaymentID: p.PaymentID, UIN: p.UIN, Amount: p.Amount}
	if !p.PaidAt.IsZero() {
		req.PaymentDate = p.PaidAt.In(moscow).Format(time.DateOnly)
	}
	var st paymentStatus
	if err := c.call(ctx, http.MethodPost, "/payments", req, write, &st); err != nil {
		return err
	}
	if err := c.expect(st, p.PaymentID, write, statusAccepted, statusAnnulled); err != nil {
		return err
	}
	if st.Status == statusAnnulled {
		return fmt.Errorf("%w: %s answered the replay of payment %q with its status annulled", registry.ErrAnnulled, c.name, p.PaymentID)
	}
	return nil
}

// Annul annuls a payment: POST /payments/{id}/annulment. An id the party
// does not hold is nothing to annul.
func (c *Client) Annul(ctx context.Context, paymentID string) error {
	var st paymentStatus
	if err := c.call(ctx, http.MethodPost, "/payments/"+url.PathEscape(paymentID)+"/annulment", nil, write, &st); err != nil {
		return err
	}
	return c.expect(st, paymentID, write, statusAnnulled, statusNotFound)
}

// Lookup asks for a payment: GET /payments/{id}.
func (c *Client) Lookup(ctx context.Context, paymentID string) (found, annulled bool, err error) {
	var st paymentStatus
	if err := c.call(ctx, http.MethodGet, "/payments/"+url.PathEscape(paymentID), nil, read, &st); err != nil {
		return false, false, err
	}
	if err := c.expect(st, paymentID, read, statusAccepted, statusAnnulled, statusNotFound); err != nil {
		return false, false, err
	}
	return st.Status != statusNotFound, st.Status == statusAnnulled, nil
}

// Quittance asks for the payments against an accrual: GET /quittances/{uin}.
func (c *Client) Quittance(ctx context.Context, uin string) (registry.Quittance, error) {
	var a quittanceAnswer
	if err := c.call(ctx, http.MethodGet, "/quittances/"+url.PathEscape(uin), nil, read, &a); err != nil {
		return registry.Quittance{}, err
	}
	if a.UIN != uin {
		return registry.Quittance{}, fmt.Errorf("%w: %s answered for accrual %q, not %q", registry.ErrUnavailable, c.name, a.UIN, uin)
	}
	q := registry.Quittance{Payments: make([]registry.QuittancePayment, 0, len(a.Payments)), Settled: a.Settled}
	for _, p := range a.Payments {
		q.Payments = append(q.Payments, registry.QuittancePayment{PaymentID: p.PaymentID, Amount: p.Amount, Annulled: p.Annulled})
	}
	return q, nil
}

// exportAnswer is one page of the export of a day's payments.
type exportAnswer struct {
	Date     string `json:"date"`
	Payments []struct {
		PaymentID  string     `json:"payment_id"`
		UIN        string     `json:"uin"`
		Amount     int64      `json:"amount"`
		Status     string     `json:"status"`
		ReceivedAt time.Time  `json:"received_at"`
		AcceptedAt *time.Time `json:"accepted_at"`
		AnnulledAt *time.Time `json:"annulled_at"`
	} `json:"payments"`
	NextCursor string `json:"next_cursor"`
}

// maxExportPages bounds the pages one export reads: a party whose cursor
// never ends is not answering.
const maxExportPages = 10_000

// Export lists the payments the party took on the UTC day: GET
// /payments?date=YYYY-MM-DD, then ?cursor= while next_cursor is given.
// A 404 is a party without the export (registry.ErrExportUnsupported).
func (c *Client) Export(ctx context.Context, day time.Time) ([]registry.ExportedPayment, error) {
	date := day.UTC().Format(time.DateOnly)
	var out []registry.ExportedPayment
	cursor := ""
	for range maxExportPages {
		q := url.Values{"date": {date}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var a exportAnswer
		err := c.call(ctx, http.MethodGet, "/payments?"+q.Encode(), nil, read, &a)
		var nf *notFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("%s: export answered 404: %w", c.name, registry.ErrExportUnsupported)
		}
		if err != nil {
			return nil, err
		}
		if a.Date != date {
			return nil, fmt.Errorf("%w: %s exported day %q, not %q", registry.ErrUnavailable, c.name, a.Date, date)
		}
		for _, p := range a.Payments {
			e := registry.ExportedPayment{PaymentID: p.PaymentID, UIN: p.UIN, Amount: p.Amount, Status: registry.RegistryStatus(p.Status),
				ReceivedAt: p.ReceivedAt.UTC()}
			switch e.Status {
			case registry.RegistryProcessing, registry.RegistryAccepted, registry.RegistryAnnulled:
			default:
				return nil, fmt.Errorf("%w: %s exported payment %q with status %q", registry.ErrUnavailable, c.name, p.PaymentID, p.Status)
			}
			if p.AcceptedAt != nil {
				e.AcceptedAt = p.AcceptedAt.UTC()
			}
			if p.AnnulledAt != nil {
				e.AnnulledAt = p.AnnulledAt.UTC()
			}
			out = append(out, e)
		}
		if a.NextCursor == "" {
			return out, nil
		}
		cursor = a.NextCursor
	}
	return nil, fmt.Errorf("%w: %s: the export of %s did not end within %d pages", registry.ErrUnavailable, c.name, date, maxExportPages)
}

// notFoundError is a 404: for most calls a base URL to fix, for the export
// a party without one.
type notFoundError struct{ name string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%s: refused with 404: check its base_url and credentials", e.name)
}

// Is makes a 404 a call that did nothing.
func (e *notFoundError) Is(target error) bool { return target == registry.ErrUnavailable }

// kind tells a write, whose lost answer leaves the outcome unknown, from a
// read, which did nothing when it fails.
type kind bool

const (
	write kind = true
	read  kind = false
)

// lost is the error of a call whose outcome cannot be told: unknown for a
// write, nothing done for a read.
func (k kind) lost() error {
	if k == write {
		return registry.ErrUnknownOutcome
	}
	return registry.ErrUnavailable
}

// expect checks that an answer is about id and in one of want.
func (c *Client) expect(st paymentStatus, id string, k kind, want ...string) error {
	for _, w := range want {
		if st.Status == w && st.PaymentID == id {
			return nil
		}
	}
	return fmt.Errorf("%w: %s answered status %q for payment %q, asked about %q", k.lost(), c.name, st.Status, st.PaymentID, id)
}

// maxBody bounds what is read of an answer.
const maxBody = 1 << 20

// call sends one request and decodes a 200 or 201 answer into out; every
// other answer, or none, is classified into the gateway's errors.
func (c *Client) call(ctx context.Context, method, path string, body any, k kind, out any) error {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: %s: encode request: %w", registry.ErrUnavailable, c.name, err)
		}
		reader = bytes.NewReader(raw)
	}
	var wrote atomic.Bool // set by the transport's writing goroutine
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wrote.Store(true)
		}
	}})
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, c.name, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if refusedHandshake(err) {
			c.certificateError(err)
		}
		if !wrote.Load() || refusedHandshake(err) {
			return fmt.Errorf("%w: %s: %s %s: %w", registry.ErrUnavailable, c.name, method, path, err)
		}
		return fmt.Errorf("%w: %s: %s %s: %w", k.lost(), c.name, method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: %s: %s %s: reading the answer: %w", k.lost(), c.name, method, path, err)
	}
	return c.classify(resp, raw, k, out)
}

// classify is what an answer means to rebill (see the package doc).
func (c *Client) classify(resp *http.Response, raw []byte, k kind, out any) error {
	status := resp.StatusCode
	switch {
	case status == http.StatusOK || status == http.StatusCreated:
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%w: %s: answer %d is not the protocol's JSON: %w", k.lost(), c.name, status, err)
		}
		return nil
	case status == http.StatusAccepted:
		return &registry.PendingError{Gateway: c.name, RetryAfter: c.retryAfter(resp)}
	case status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s: rate limited (429), retry after %s", registry.ErrUnavailable, c.name, c.retryAfter(resp))
	case status == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: %s: unavailable (503)", registry.ErrUnavailable, c.name)
	case status == http.StatusBadRequest || status == http.StatusConflict || status == http.StatusUnprocessableEntity:
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			// Not the party's refusal: a proxy's or a misconfiguration's.
			return fmt.Errorf("%w: %s: answer %d without the protocol's error body", registry.ErrUnavailable, c.name, status)
		}
		return fmt.Errorf("%w: %s: %d %s: %s", registry.ErrRejected, c.name, status, e.Error.Code, clip(e.Error.Message))
	case status == http.StatusNotFound:
		return &notFoundError{name: c.name}
	case status >= 400 && status < 500:
		// 401, 403, 404, 405...: the party did not take the call (a
		// credential or a base URL to fix), so nothing was done.
		return fmt.Errorf("%w: %s: refused with %d: check its base_url and credentials", registry.ErrUnavailable, c.name, status)
	default:
		return fmt.Errorf("%w: %s: answer %d", k.lost(), c.name, status)
	}
}

// retryAfter reads Retry-After, in seconds or as a date; zero when absent.
func (c *Client) retryAfter(resp *http.Response) time.Duration {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(c.now()), 0)
	}
	return 0
}

// certificateWarnEvery bounds how often a certificate error is told: a
// posting asks again every few seconds.
const certificateWarnEvery = time.Minute

// certificateError tells OnCertificateError of err, unless it was told of
// one less than certificateWarnEvery ago.
func (c *Client) certificateError(err error) {
	if c.onCertificateError == nil {
		return
	}
	now, last := c.now().UnixNano(), c.certWarnedAt.Load()
	if last != 0 && now-last < int64(certificateWarnEvery) || !c.certWarnedAt.CompareAndSwap(last, now) {
		return
	}
	c.onCertificateError(fmt.Errorf("%s: %w", c.name, err))
}

// refusedHandshake reports whether the party ended the TLS handshake (a
// client certificate it does not accept, or none): it never read the
// request, though the client may have written it (TLS 1.3 reports the
// refusal after the client's side of the handshake is done).
func refusedHandshake(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "remote error" {
		return true
	}
	var verifyErr *tls.CertificateVerificationError
	return errors.As(err, &verifyErr)
}

// clip keeps a party's message short in an error and in the posting's
// last_error.
func clip(s string) string {
	const n = 200
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
