// Package billsource pulls bills over HTTP from a production bill source
// (a bridge to GIS ZhKH for housing, to GIS GMP through the bank for
// fines), as an [autopay.BillSource].
//
// # Protocol
//
// One endpoint, POST {base_url}/bills/query, with a JSON body
//
//	{"accounts": [{"els": "..."}, {"sts": "..."}, {"driver_license": "..."}],
//	 "after_sequence": 0, "limit": 200}
//
// answered 200 with
//
//	{"bills": [{"sequence": 1, "bill_id": "...", "account": {"sts": "..."},
//	            "amount": 100000, "discounted_amount": 50000,
//	            "discount_deadline": "2027-03-20", "issued_at": "2027-03-01T09:00:00Z",
//	            "due_date": "2027-05-09", "paid_amount": 0}],
//	 "has_more": false, "next_sequence": 1}
//
// Sequences grow with publication; bills come in sequence order, above
// after_sequence, at most limit of them. With has_more, ask again from
// next_sequence; without, next_sequence is the source's head. 429 and 5xx
// are retried with backoff (429 after its Retry-After), as are timeouts
// and transport errors; other statuses fail the pull at once.
// docs/bill-sources.md is the operator's version of this.
package billsource

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/time/rate"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/enrollments"
)

// Config is one source's settings.
type Config struct {
	Name         string
	BaseURL      string
	Token        string      // bearer token; "": none
	TLS          *tls.Config // nil: the system's trust store, no client certificate
	Timeout      time.Duration
	BatchSize    int
	RateLimit    float64 // requests per second, retries included
	RereadWindow time.Duration
	// MaxTries bounds the tries of one request (0: 5).
	MaxTries uint
	// Backoff makes the wait between tries (nil: exponential from 500 ms,
	// at most 10 s, jittered).
	Backoff func() backoff.BackOff
	// Now and Sleep are the rate limiter's time (nil: the wall clock).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Client is a bill source over HTTP. Safe for concurrent use.
type Client struct {
	cfg     Config
	http    *http.Client
	limiter *rate.Limiter
}

// maxBody bounds an answer: a page of at most 1000 bills is far smaller.
const maxBody = 16 << 20

// maxRetryAfter caps a 429's Retry-After: a longer wait is the next pull's.
const maxRetryAfter = time.Minute

// New returns the source cfg describes.
func New(cfg Config) *Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		transport.TLSClientConfig = cfg.TLS.Clone()
	}
	if cfg.MaxTries == 0 {
		cfg.MaxTries = 5
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval, b.MaxInterval = 500*time.Millisecond, 10*time.Second
			return b
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return &Client{cfg: cfg, http: &http.Client{Transport: transport},
		limiter: rate.NewLimiter(rate.Limit(cfg.RateLimit), 1)}
}

// Info describes the source to the pull.
func (c *Client) Info() autopay.SourceInfo {
	return autopay.SourceInfo{Name: c.cfg.Name, BatchSize: c.cfg.BatchSize, RereadWindow: c.cfg.RereadWindow}
}

// Account is an account identifier on the wire: one of the three.
type Account struct {
	ELS           string `json:"els,omitempty"`
	STS           string `json:"sts,omitempty"`
	DriverLicense string `json:"driver_license,omitempty"`
}

// QueryRequest is the body of POST /bills/query.
type QueryRequest struct {
	Accounts      []Account `json:"accounts"`
	AfterSequence int64     `json:"after_sequence"`
	Limit         int       `json:"limit"`
}

// Bill is a published bill on the wire. Amounts are kopecks, dates
// YYYY-MM-DD (Moscow's calendar), issued_at RFC 3339.
type Bill struct {
	Sequence         int64     `json:"sequence"`
	BillID           string    `json:"bill_id"`
	Account          Account   `json:"account"`
	Amount           int64     `json:"amount"`
	DiscountedAmount *int64    `json:"discounted_amount,omitempty"`
	DiscountDeadline *string   `json:"discount_deadline,omitempty"`
	IssuedAt         time.Time `json:"issued_at"`
	DueDate          string    `json:"due_date"`
	// PaidAmount is what the source knows was paid against the bill. It
	// may include rebill's own payments (the supplier reports every
	// payment back): rebill subtracts its own captures of a housing bill
	// and never counts a fine's figure by itself.
	PaidAmount int64 `json:"paid_amount,omitempty"`
	// A housing bill's GIS ZhKH identifiers and supplier, each optional
	// (enrollments.BillInput).
	PaymentDocumentID string `json:"payment_document_id,omitempty"`
	ServiceID         string `json:"service_id,omitempty"`
	Period            string `json:"period,omitempty"`
	SupplierINN       string `json:"supplier_inn,omitempty"`
	SupplierKPP       string `json:"supplier_kpp,omitempty"`
	SupplierName      string `json:"supplier_name,omitempty"`
}

// QueryResponse is the body of a 200 answer.
type QueryResponse struct {
	Bills        []Bill `json:"bills"`
	HasMore      bool   `json:"has_more"`
	NextSequence int64  `json:"next_sequence"`
}

// StatusError is a status the source answered other than 200.
type StatusError struct{ Status int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("bill source answered %d %s", e.Status, http.StatusText(e.Status))
}

// ErrProtocol: the source's answer breaks the protocol (sequences out of
// order, too many bills, no progress); trying again would not help.
var ErrProtocol = errors.New("bill source broke the protocol")

// Pull asks for one page, retrying what may pass (see the package doc).
func (c *Client) Pull(ctx context.Context, req autopay.PullRequest) (autopay.Page, error) {
	body := QueryRequest{Accounts: make([]Account, len(req.Accounts)), AfterSequence: req.After, Limit: req.Limit}
	for i, a := range req.Accounts {
		body.Accounts[i] = Account{ELS: a.ELS, STS: a.STS, DriverLicense: a.DriverLicense}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return autopay.Page{}, fmt.Errorf("encode bill query: %w", err)
	}
	resp, err := backoff.Retry(ctx, func() (QueryResponse, error) { return c.try(ctx, raw) },
		backoff.WithBackOff(c.cfg.Backoff()), backoff.WithMaxTries(c.cfg.MaxTries), backoff.WithMaxElapsedTime(0))
	if err != nil {
		return autopay.Page{}, err
	}
	return toPage(resp, req)
}

// try makes one request, after the rate limiter lets it.
func (c *Client) try(ctx context.Context, body []byte) (QueryResponse, error) {
	if err := c.wait(ctx); err != nil {
		return QueryResponse{}, backoff.Permanent(err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	endpoint := strings.TrimSuffix(c.cfg.BaseURL, "/") + "/bills/query"
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return QueryResponse{}, backoff.Permanent(fmt.Errorf("bill query: %w", err))
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		r.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	res, err := c.http.Do(r)
	if err != nil {
		// The URL is the operator's, but a transport error can quote it:
		// only the kind of failure is kept.
		return QueryResponse{}, fmt.Errorf("bill query: %w", unwrapURL(err))
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusOK:
	case res.StatusCode == http.StatusTooManyRequests:
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxBody))
		return QueryResponse{}, retryAfter(res.Header.Get("Retry-After"), &StatusError{Status: res.StatusCode})
	case res.StatusCode >= 500 || res.StatusCode == http.StatusRequestTimeout:
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxBody))
		return QueryResponse{}, &StatusError{Status: res.StatusCode}
	default:
		return QueryResponse{}, backoff.Permanent(&StatusError{Status: res.StatusCode})
	}
	var out QueryResponse
	if err := json.NewDecoder(io.LimitReader(res.Body, maxBody)).Decode(&out); err != nil {
		return QueryResponse{}, fmt.Errorf("decode bill query answer: %w", err)
	}
	return out, nil
}

// wait takes a token of the rate limiter, sleeping until it is due.
func (c *Client) wait(ctx context.Context) error {
	now := c.cfg.Now()
	r := c.limiter.ReserveN(now, 1)
	if !r.OK() {
		return errors.New("bill source rate limit admits no request")
	}
	if d := r.DelayFrom(now); d > 0 {
		if err := c.cfg.Sleep(ctx, d); err != nil {
			r.CancelAt(c.cfg.Now())
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter wraps err so that the next try waits what header asks (in
// seconds, capped), or the backoff's own wait when it says nothing usable.
func retryAfter(header string, err error) error {
	secs, perr := strconv.Atoi(strings.TrimSpace(header))
	if perr != nil || secs < 0 {
		return err
	}
	wait := min(time.Duration(secs)*time.Second, maxRetryAfter)
	return &retryAfterError{err: err, wait: wait}
}

// retryAfterError is backoff's RetryAfterError that keeps the status.
type retryAfterError struct {
	err  error
	wait time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() []error {
	return []error{e.err, &backoff.RetryAfterError{Duration: e.wait}}
}

// unwrapURL drops the *url.Error around a transport error, keeping its
// operation.
func unwrapURL(err error) error {
	var u *url.Error
	if errors.As(err, &u) {
		return fmt.Errorf("%s: %w", u.Op, u.Err)
	}
	return err
}

// toPage checks an answer against the protocol and converts its bills; a
// bill that cannot be read goes to Page.Invalid.
func toPage(resp QueryResponse, req autopay.PullRequest) (autopay.Page, error) {
	if len(resp.Bills) > req.Limit {
		return autopay.Page{}, fmt.Errorf("%w: %d bills for a limit of %d", ErrProtocol, len(resp.Bills), req.Limit)
	}
	page := autopay.Page{HasMore: resp.HasMore, Next: resp.NextSequence}
	last := req.After
	for _, b := range resp.Bills {
		if b.Sequence <= last {
			return autopay.Page{}, fmt.Errorf("%w: sequence %d after %d", ErrProtocol, b.Sequence, last)
		}
		last = b.Sequence
		sb, err := toSourced(b)
		if err != nil {
			page.Invalid = append(page.Invalid, autopay.InvalidBill{BillID: b.BillID, Sequence: b.Sequence, Err: err})
			continue
		}
		page.Bills = append(page.Bills, sb)
	}
	switch {
	case resp.NextSequence < last:
		return autopay.Page{}, fmt.Errorf("%w: next_sequence %d below the last bill's %d", ErrProtocol, resp.NextSequence, last)
	case resp.HasMore && resp.NextSequence <= req.After:
		return autopay.Page{}, fmt.Errorf("%w: has_more without progress past %d", ErrProtocol, req.After)
	}
	return page, nil
}

func toSourced(b Bill) (autopay.SourcedBill, error) {
	var errs []error
	refs := 0
	for _, v := range []string{b.Account.ELS, b.Account.STS, b.Account.DriverLicense} {
		if v != "" {
			refs++
		}
	}
	if refs == 0 {
		errs = append(errs, errors.New("account: names no els, sts or driver_license"))
	}
	due, err := enrollments.ParseDate(b.DueDate)
	if err != nil {
		errs = append(errs, fmt.Errorf("due_date: %w", err))
	}
	in := enrollments.BillInput{BillID: b.BillID, Amount: b.Amount, IssuedAt: b.IssuedAt, DueDate: due,
		DiscountedAmount: b.DiscountedAmount, PaymentDocumentID: b.PaymentDocumentID, ServiceID: b.ServiceID, Period: b.Period,
		Supplier: enrollments.Supplier{INN: b.SupplierINN, KPP: b.SupplierKPP, Name: b.SupplierName}}
	if b.DiscountDeadline != nil {
		d, err := enrollments.ParseDate(*b.DiscountDeadline)
		if err != nil {
			errs = append(errs, fmt.Errorf("discount_deadline: %w", err))
		}
		in.DiscountDeadline = &d
	}
	if b.PaidAmount < 0 {
		errs = append(errs, errors.New("paid_amount: negative"))
	}
	if len(errs) > 0 {
		return autopay.SourcedBill{}, errors.Join(errs...)
	}
	return autopay.SourcedBill{Account: enrollments.AccountRef{ELS: b.Account.ELS, STS: b.Account.STS,
		DriverLicense: b.Account.DriverLicense}, Bill: in, PaidOutside: b.PaidAmount}, nil
}
