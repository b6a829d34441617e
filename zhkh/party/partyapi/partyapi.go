// Package partyapi is a GIS ZhKH party (party.Party) over HTTP: the API of
// a bank or payment agent that places payment information in GIS ZhKH on
// rebill's behalf. The protocol is docs/registry.md's ("The party's
// protocol" of the GIS ZhKH section); package partyfake plays the other
// side in tests. It is rebill's protocol, proposed to a party: no party's
// published API is known to match it (unverified).
//
// # Outcomes
//
// What an answer means is decided in one place, classify, as in the GIS
// GMP adapter (charges/registry/agentapi): a call refused before the party
// could act (no connection, a refused TLS handshake, 429, 503, 401, 403,
// 404) did nothing (party.ErrUnavailable); 202 is taken, no outcome yet
// (*party.PendingError); 422 with the protocol's error body is GIS ZhKH's
// refusal for good (*party.RefusedError, its message the reason); a
// report answered cancelled is a replay of an annulled one
// (party.ErrCancelled); a write whose answer may have been lost after the
// request was sent has an unknown outcome (party.ErrUnknownOutcome). A
// read that fails did nothing.
package partyapi

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

	"github.com/rebill/rebill/zhkh/party"
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
}

// Client is one party over HTTP. Its calls are bounded by the caller's
// context (party.Balancer gives each the entry's timeout).
type Client struct {
	name  string
	base  string
	token string
	http  *http.Client
	now   func() time.Time
}

// New returns the client of o.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("GIS ZhKH party %s: base URL: want an absolute https URL", o.Name)
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
		http: &http.Client{Transport: transport, CheckRedirect: noRedirects}, now: now}, nil
}

// noRedirects keeps a redirect from sending a payment, and the bearer
// token, somewhere the configuration does not name.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Name is the entry's name.
func (c *Client) Name() string { return c.name }

// ReportRequest is the body of POST /reports.
type ReportRequest struct {
	ReportID string `json:"report_id"`
	Account  string `json:"account"`
	BillID   string `json:"bill_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// PaidAt is RFC 3339, UTC.
	PaidAt            string `json:"paid_at"`
	PaymentRef        string `json:"payment_ref"`
	PaymentDocumentID string `json:"payment_document_id,omitempty"`
	ServiceID         string `json:"service_id,omitempty"`
	Period            string `json:"period,omitempty"`
	SupplierINN       string `json:"supplier_inn,omitempty"`
	SupplierKPP       string `json:"supplier_kpp,omitempty"`
	SupplierName      string `json:"supplier_name,omitempty"`
}

// ReportStatus is the party's answer about one report.
type ReportStatus struct {
	ReportID string `json:"report_id"`
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
}

// ErrorBody is the protocol's error answer (a 422's refusal).
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Report places p: POST /reports.
func (c *Client) Report(ctx context.Context, p party.Payment) error {
	req := ReportRequest{ReportID: p.ReportID, Account: p.Account, BillID: p.BillID, Amount: p.Amount, Currency: p.Currency,
		PaidAt: p.PaidAt.UTC().Format(time.RFC3339), PaymentRef: p.PaymentRef, PaymentDocumentID: p.PaymentDocumentID,
		ServiceID: p.ServiceID, Period: p.Period, SupplierINN: p.SupplierINN, SupplierKPP: p.SupplierKPP, SupplierName: p.SupplierName}
	var st ReportStatus
	if err := c.call(ctx, http.MethodPost, "/reports", req, write, &st); err != nil {
		return err
	}
	if err := c.expect(st, p.ReportID, write, party.StatusAccepted, party.StatusCancelled, party.StatusRefused); err != nil {
		return err
	}
	switch party.Status(st.Status) {
	case party.StatusCancelled:
		return fmt.Errorf("%w: %s answered the replay of report %q with its status cancelled", party.ErrCancelled, c.name, p.ReportID)
	case party.StatusRefused:
		return &party.RefusedError{Party: c.name, Reason: clip(st.Reason)}
	}
	return nil
}

// Cancel annuls a report: POST /reports/{id}/cancellation. An id the
// party does not hold is nothing to annul.
func (c *Client) Cancel(ctx context.Context, reportID string) error {
	var st ReportStatus
	if err := c.call(ctx, http.MethodPost, "/reports/"+url.PathEscape(reportID)+"/cancellation", nil, write, &st); err != nil {
		return err
	}
	return c.expect(st, reportID, write, party.StatusCancelled, party.StatusNotFound, party.StatusRefused)
}

// Lookup asks for a report: GET /reports/{id}.
func (c *Client) Lookup(ctx context.Context, reportID string) (party.Status, string, error) {
	var st ReportStatus
	if err := c.call(ctx, http.MethodGet, "/reports/"+url.PathEscape(reportID), nil, read, &st); err != nil {
		return "", "", err
	}
	if err := c.expect(st, reportID, read, party.StatusAccepted, party.StatusCancelled, party.StatusRefused, party.StatusNotFound,
		party.StatusProcessing); err != nil {
		return "", "", err
	}
	return party.Status(st.Status), clip(st.Reason), nil
}

type kind bool

const (
	write kind = true
	read  kind = false
)

// lost is the error of a call whose outcome cannot be told: unknown for a
// write, nothing done for a read.
func (k kind) lost() error {
	if k == write {
		return party.ErrUnknownOutcome
	}
	return party.ErrUnavailable
}

func (c *Client) expect(st ReportStatus, id string, k kind, want ...party.Status) error {
	for _, w := range want {
		if party.Status(st.Status) == w && st.ReportID == id {
			return nil
		}
	}
	return fmt.Errorf("%w: %s answered status %q for report %q, asked about %q", k.lost(), c.name, st.Status, st.ReportID, id)
}

const maxBody = 1 << 20

func (c *Client) call(ctx context.Context, method, path string, body any, k kind, out any) error {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: %s: encode request: %w", party.ErrUnavailable, c.name, err)
		}
		reader = bytes.NewReader(raw)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wrote.Store(true)
		}
	}})
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", party.ErrUnavailable, c.name, err)
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
		if !wrote.Load() || refusedHandshake(err) {
			return fmt.Errorf("%w: %s: %s %s: %w", party.ErrUnavailable, c.name, method, path, err)
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

func (c *Client) classify(resp *http.Response, raw []byte, k kind, out any) error {
	status := resp.StatusCode
	switch {
	case status == http.StatusOK || status == http.StatusCreated:
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%w: %s: answer %d is not the protocol's JSON: %w", k.lost(), c.name, status, err)
		}
		return nil
	case status == http.StatusAccepted:
		return &party.PendingError{Party: c.name, RetryAfter: c.retryAfter(resp)}
	case status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s: rate limited (429), retry after %s", party.ErrUnavailable, c.name, c.retryAfter(resp))
	case status == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: %s: unavailable (503)", party.ErrUnavailable, c.name)
	case status == http.StatusUnprocessableEntity:
		var e ErrorBody
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("%w: %s: answer %d without the protocol's error body", party.ErrUnavailable, c.name, status)
		}
		return &party.RefusedError{Party: c.name, Reason: clip(e.Error.Code + ": " + e.Error.Message)}
	case status >= 400 && status < 500:
		// 400, 401, 403, 404...: the party did not take the call (a
		// request, a credential or a base URL to fix): nothing was done.
		return fmt.Errorf("%w: %s: refused with %d: check its base_url and credentials", party.ErrUnavailable, c.name, status)
	default:
		return fmt.Errorf("%w: %s: answer %d", k.lost(), c.name, status)
	}
}

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

// refusedHandshake reports whether the party ended the TLS handshake (a
// client certificate it does not accept, or none), or rebill could not
// verify the party's: it never read the request.
func refusedHandshake(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "remote error" {
		return true
	}
	var verifyErr *tls.CertificateVerificationError
	return errors.As(err, &verifyErr)
}

// clip keeps a party's message short in an error and in last_error.
func clip(s string) string {
	const n = 200
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
