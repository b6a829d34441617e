package yookassa

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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/clock"
)

// DefaultBaseURL is YooKassa's API v3 endpoint.
const DefaultBaseURL = "https://api.yookassa.ru/v3"

const (
	// defaultTimeout bounds a call when Config.Timeout is zero.
	defaultTimeout = 10 * time.Second
	// keyRetention is how long YooKassa remembers an Idempotence-Key.
	keyRetention = 24 * time.Hour
	// clockSkew is the margin between rebill's clock and YooKassa's: a
	// replay stops that much before the key could be forgotten, and the
	// scan of created_at starts that much before the first send.
	clockSkew = 10 * time.Minute
	// listPageSize is the largest page the list endpoint serves.
	listPageSize = 100
	// maxDescription is the longest payment description YooKassa takes.
	maxDescription = 128
)

// idempotenceNamespace is the UUIDv5 namespace of Idempotence-Keys:
// rebill's keys can exceed YooKassa's 64 characters, and the same rebill
// key must give the same header on every node and restart.
var idempotenceNamespace = uuid.MustParse("6f1d2c9e-5b0a-4f7e-9a43-2e8d7c1b0a55")

// IdempotenceKey is the Idempotence-Key header sent for rebill's key: a
// UUIDv5, 36 characters, stable for ever.
func IdempotenceKey(key string) string {
	return uuid.NewSHA1(idempotenceNamespace, []byte(key)).String()
}

// Config is one YooKassa shop. ShopID and SecretKey come from the
// environment variables the gateways file names, never from the file.
type Config struct {
	Name, BaseURL, ShopID, SecretKey string
	// Timeout bounds each operation, waits for a 202 included; past it
	// the outcome is unknown. Default 10s.
	Timeout time.Duration
	// HTTPClient sends the requests; nil: a client of its own.
	HTTPClient *http.Client
	// Clock must be the clock that stamps LookupRequest.SentAt: replays
	// and scans are bounded by it. Nil: the wall clock.
	Clock clock.Clock
}

// Gateway is a [gateway.Gateway] on one YooKassa shop. It is safe for
// concurrent use and keeps no state between calls.
type Gateway struct {
	name    string
	baseURL string
	shopID  string
	secret  string
	timeout time.Duration
	http    *http.Client
	clock   clock.Clock
}

var _ gateway.Gateway = (*Gateway)(nil)

// New checks cfg and returns the gateway. BaseURL "" is [DefaultBaseURL].
func New(cfg Config) (*Gateway, error) {
	if cfg.Name == "" {
		return nil, errors.New("yookassa: the gateway needs a name")
	}
	if cfg.ShopID == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("yookassa %s: shop_id and secret_key are both required", cfg.Name)
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("yookassa %s: base URL does not parse", cfg.Name)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("yookassa %s: base URL %q is not an absolute http(s) URL without credentials", cfg.Name, u.Redacted())
	}
	g := &Gateway{name: cfg.Name, baseURL: strings.TrimRight(base, "/"), shopID: cfg.ShopID, secret: cfg.SecretKey,
		timeout: cfg.Timeout, http: cfg.HTTPClient, clock: cfg.Clock}
	if g.timeout <= 0 {
		g.timeout = defaultTimeout
	}
	if g.http == nil {
		g.http = &http.Client{Transport: gateway.Transport()}
	}
	if g.clock == nil {
		g.clock = clock.Wall{}
	}
	return g, nil
}

// Name returns the configured gateway name.
func (g *Gateway) Name() string { return g.name }

// Authorize places a hold: a payment with capture false on the saved
// payment method req.Token. Its Reference is the payment id.
func (g *Gateway) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	out, err := g.create(ctx, req)
	if err != nil {
		return gateway.Result{}, err
	}
	if out.payment == nil {
		return out.failed, nil
	}
	return g.authorized(ctx, req, *out.payment)
}

// created is what a create came to: a payment, or a failed result.
type created struct {
	payment *payment
	failed  gateway.Result
	// refused: YooKassa refused the request (rather than rebill, before
	// sending it).
	refused bool
}

// create sends POST /payments. A request that cannot be written, or that
// YooKassa refuses, comes back as a StatusFailed result and no payment.
func (g *Gateway) create(ctx context.Context, req gateway.Request) (created, error) {
	value, err := formatAmount(req.Amount, req.Currency)
	if req.Amount <= 0 && err == nil {
		err = fmt.Errorf("%w: %d is not positive", errAmount, req.Amount)
	}
	if err != nil {
		return created{failed: g.failed(gateway.OpAuthorize, req, "invalid_amount")}, nil
	}
	rcpt, err := toReceipt(req.Receipt, req.Currency)
	if err != nil {
		return created{failed: g.failed(gateway.OpAuthorize, req, "invalid_receipt")}, nil
	}
	description := "rebill " + req.ChargeKey
	if len(description) > maxDescription {
		description = description[:maxDescription]
	}
	body := createPayment{
		Amount:          amount{Value: value, Currency: req.Currency},
		PaymentMethodID: req.Token,
		Description:     description,
		Metadata:        map[string]string{metaChargeKey: req.ChargeKey, metaGatewayKey: req.IdempotencyKey},
		Receipt:         rcpt,
	}
	var p payment
	err = g.call(ctx, http.MethodPost, "/payments", req.IdempotencyKey, body, &p)
	if refused := (*apiError)(nil); errors.As(err, &refused) {
		return created{failed: g.failed(gateway.OpAuthorize, req, refused.Code), refused: true}, nil
	}
	if err != nil {
		return created{}, g.wrap(gateway.OpAuthorize, req.IdempotencyKey, err)
	}
	return created{payment: &p}, nil
}

// authorized turns a payment into the authorize's result, waiting while it
// is pending (the issuer has not answered yet).
func (g *Gateway) authorized(ctx context.Context, req gateway.Request, p payment) (gateway.Result, error) {
	p, err := g.settle(ctx, p, statusPending)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpAuthorize, req.IdempotencyKey, err)
	}
	return g.authorizeResult(req.IdempotencyKey, p)
}

// authorizeResult is what a payment says of its hold: placed (whatever
// happened to it since: captured, voided, lapsed) or declined.
func (g *Gateway) authorizeResult(key string, p payment) (gateway.Result, error) {
	res, err := g.result(gateway.OpAuthorize, key, p)
	if err != nil {
		return res, err
	}
	res.At = p.CreatedAt
	switch reason := p.reason(); {
	case p.Status == statusWaitingForCapture || p.Status == statusSucceeded:
		res.Status = gateway.StatusSucceeded
	case p.Status == statusCanceled && heldBefore(reason):
		res.Status = gateway.StatusSucceeded
	case p.Status == statusCanceled:
		res.Status, res.DeclineCode, res.Hard = gateway.StatusDeclined, reason, hardDecline(reason)
		if reason == "" {
			res.DeclineCode = "canceled"
		}
	default:
		return gateway.Result{}, fmt.Errorf("%w: payment %s is still %s", gateway.ErrUnknownOutcome, p.ID, p.Status)
	}
	if p.ExpiresAt != nil {
		res.ExpiresAt = p.ExpiresAt.UTC()
	}
	return res, nil
}

// Capture collects the hold named by req.AuthorizationID, sending the
// receipt again when req carries one. A hold that lapsed answers
// StatusFailed with DeclineCode "expired_on_capture": authorize again.
func (g *Gateway) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if req.AuthorizationID == "" {
		return g.failed(gateway.OpCapture, req, "no_authorization"), nil
	}
	value, err := formatAmount(req.Amount, req.Currency)
	if err != nil {
		return g.failed(gateway.OpCapture, req, "invalid_amount"), nil
	}
	rcpt, err := toReceipt(req.Receipt, req.Currency)
	if err != nil {
		return g.failed(gateway.OpCapture, req, "invalid_receipt"), nil
	}
	body := capturePayment{Amount: amount{Value: value, Currency: req.Currency}, Receipt: rcpt}
	p, refused, err := g.paymentOp(ctx, req, "/capture", body)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpCapture, req.IdempotencyKey, err)
	}
	if p == nil {
		return g.failed(gateway.OpCapture, req, "payment_not_found"), nil
	}
	if refused != nil && p.Status != statusSucceeded && p.Status != statusCanceled {
		// Refused for the request itself (an amount over the hold, a bad
		// receipt): the hold is still there, uncaptured.
		return g.failed(gateway.OpCapture, req, refused.Code), nil
	}
	// A capture still under way answers the payment as it was.
	settled, err := g.settle(ctx, *p, statusWaitingForCapture)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpCapture, req.IdempotencyKey, err)
	}
	return g.captureResult(req.IdempotencyKey, settled)
}

// captureResult: a succeeded payment is captured; a canceled one was not
// and cannot be (its reason is the code).
func (g *Gateway) captureResult(key string, p payment) (gateway.Result, error) {
	res, err := g.result(gateway.OpCapture, key, p)
	if err != nil {
		return res, err
	}
	switch p.Status {
	case statusSucceeded:
		res.Status = gateway.StatusSucceeded
		if p.CapturedAt != nil {
			res.At = p.CapturedAt.UTC()
		}
	case statusCanceled:
		res.Status, res.DeclineCode = gateway.StatusFailed, p.reason()
	default:
		return gateway.Result{}, fmt.Errorf("%w: capture of payment %s: still %s", gateway.ErrUnknownOutcome, p.ID, p.Status)
	}
	return res, nil
}

// Void releases the hold named by req.AuthorizationID. A payment already
// canceled (voided, lapsed) counts as voided; a captured one answers
// StatusFailed "already_captured".
func (g *Gateway) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if req.AuthorizationID == "" {
		return g.failed(gateway.OpVoid, req, "no_authorization"), nil
	}
	p, refused, err := g.paymentOp(ctx, req, "/cancel", struct{}{})
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpVoid, req.IdempotencyKey, err)
	}
	if p == nil {
		return g.failed(gateway.OpVoid, req, "payment_not_found"), nil
	}
	if refused != nil && p.Status != statusSucceeded && p.Status != statusCanceled {
		return g.failed(gateway.OpVoid, req, refused.Code), nil
	}
	return g.voidResult(req.IdempotencyKey, *p)
}

func (g *Gateway) voidResult(key string, p payment) (gateway.Result, error) {
	res, err := g.result(gateway.OpVoid, key, p)
	if err != nil {
		return res, err
	}
	res.At = g.clock.Now()
	switch p.Status {
	case statusCanceled:
		res.Status = gateway.StatusSucceeded
	case statusSucceeded:
		res.Status, res.DeclineCode = gateway.StatusFailed, "already_captured"
	default:
		res.Status, res.DeclineCode = gateway.StatusFailed, "not_cancelable_"+p.Status
	}
	return res, nil
}

// paymentOp posts a capture or cancel of req's payment. When YooKassa
// refuses it, the payment is read and returned with the refusal: if it is
// no longer waiting (captured or canceled before, maybe by an earlier call
// whose answer was lost and whose key has been forgotten), its state is
// the answer. A nil payment: it does not exist.
func (g *Gateway) paymentOp(ctx context.Context, req gateway.Request, action string, body any) (*payment, *apiError, error) {
	var p payment
	path := "/payments/" + url.PathEscape(req.AuthorizationID)
	err := g.call(ctx, http.MethodPost, path+action, req.IdempotencyKey, body, &p)
	if refused := (*apiError)(nil); errors.As(err, &refused) {
		now, err := g.get(ctx, req.AuthorizationID)
		return now, refused, err
	}
	if err != nil {
		return nil, nil, err
	}
	return &p, nil, nil
}

// get reads one payment; nil when it does not exist.
func (g *Gateway) get(ctx context.Context, id string) (*payment, error) {
	var p payment
	err := g.call(ctx, http.MethodGet, "/payments/"+url.PathEscape(id), "", nil, &p)
	if refused := (*apiError)(nil); errors.As(err, &refused) && refused.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// settle reads p again while it is in status while, until it moves or
// ctx ends (the outcome is then unknown).
func (g *Gateway) settle(ctx context.Context, p payment, while string) (payment, error) {
	wait := 100 * time.Millisecond
	for p.Status == while {
		if err := sleep(ctx, wait); err != nil {
			return p, fmt.Errorf("%w: payment %s still %s: %w", gateway.ErrUnknownOutcome, p.ID, p.Status, err)
		}
		wait = min(2*wait, 2*time.Second)
		next, err := g.get(ctx, p.ID)
		if err != nil {
			// The payment exists: whatever kept it from being read, the
			// outcome is unknown, not "nothing done" (%v, not %w).
			return p, fmt.Errorf("%w: payment %s is %s and could not be read again: %v", gateway.ErrUnknownOutcome, p.ID, p.Status, err)
		}
		if next == nil {
			return p, fmt.Errorf("%w: payment %s vanished", gateway.ErrUnknownOutcome, p.ID)
		}
		p = *next
	}
	return p, nil
}

// Lookup reports what became of the operation sent as req.
//
// A capture or void is read from its payment (req.Request.AuthorizationID;
// none means the call was never sent: ErrNotFound). So is an authorize
// whose payment id an earlier answer carried. An authorize without one
// (the create's answer was lost) is sent again with the same key while
// YooKassa still remembers it (24 h from req.SentAt, less a margin): it
// answers the payment it created then, or creates it now if the first
// send never arrived, which is what the pipeline would do on ErrNotFound.
// Past that, the payments created from SentAt on are scanned for rebill's
// key in their metadata; none, or more than one: ErrUnprovable.
func (g *Gateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	r := req.Request
	if r.AuthorizationID != "" || req.Op != gateway.OpAuthorize {
		return g.lookupPayment(ctx, req.Op, r)
	}
	if req.SentAt.IsZero() {
		return gateway.Result{}, fmt.Errorf("%w: gateway %s: authorize %q: no payment id and no send time", gateway.ErrUnprovable, g.name, r.IdempotencyKey)
	}
	now := g.clock.Now()
	// A send after the key's retention would be a new payment, not this
	// one: a scan's window ends there.
	until := req.SentAt.Add(keyRetention + clockSkew)
	if now.Before(until) {
		until = now
	}
	if req.MayReplay && now.Before(req.SentAt.Add(keyRetention-clockSkew)) {
		out, err := g.create(ctx, r)
		switch {
		case err != nil:
			return gateway.Result{}, err
		case out.payment != nil:
			return g.authorized(ctx, r, *out.payment)
		case !out.refused:
			return out.failed, nil
		}
		// Refused: the request is bad, or the key is held by a payment
		// whose request differed from this one (a field the caller did not
		// send again the same way). The metadata tells which.
		res, err := g.scanFor(ctx, r, req.SentAt.Add(-clockSkew), until)
		if errors.Is(err, errNoMatch) {
			return out.failed, nil
		}
		return res, err
	}
	// Without a replay, the list is the only witness, and an empty one
	// proves nothing: the first send may still arrive, or YooKassa may
	// have forgotten the key.
	res, err := g.scanFor(ctx, r, req.SentAt.Add(-clockSkew), until)
	if errors.Is(err, errNoMatch) {
		why := "YooKassa no longer remembers the key"
		if !req.MayReplay {
			why = "the first send may still arrive, and this look may not send it again"
		}
		return gateway.Result{}, fmt.Errorf("%w: %w, and %s", gateway.ErrUnprovable, err, why)
	}
	return res, err
}

// errNoMatch: no payment carries the key.
var errNoMatch = errors.New("no payment carries the key")

// scanFor finds the one payment created in [from, to] whose metadata
// carries r's key. Several are ErrUnprovable: which one is the charge's is
// for a person to say.
func (g *Gateway) scanFor(ctx context.Context, r gateway.Request, from, to time.Time) (gateway.Result, error) {
	found, err := g.scan(ctx, from, to.Add(time.Millisecond), func(p payment) bool { return p.Metadata[metaGatewayKey] == r.IdempotencyKey })
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpAuthorize, r.IdempotencyKey, err)
	}
	switch len(found) {
	case 0:
		return gateway.Result{}, g.wrap(gateway.OpAuthorize, r.IdempotencyKey, errNoMatch)
	case 1:
		return g.authorizeResult(r.IdempotencyKey, found[0])
	}
	return gateway.Result{}, fmt.Errorf("%w: gateway %s: authorize %q: %d payments carry the key", gateway.ErrUnprovable, g.name, r.IdempotencyKey, len(found))
}

// lookupPayment answers a lookup from the payment the request names.
func (g *Gateway) lookupPayment(ctx context.Context, op gateway.Op, r gateway.Request) (gateway.Result, error) {
	if r.AuthorizationID == "" {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: no payment id, so never sent: %w", g.name, op, r.IdempotencyKey, gateway.ErrNotFound)
	}
	p, err := g.get(ctx, r.AuthorizationID)
	if err != nil {
		return gateway.Result{}, g.wrap(op, r.IdempotencyKey, err)
	}
	if p == nil {
		return gateway.Result{}, fmt.Errorf("gateway %s: %s %q: payment %s: %w", g.name, op, r.IdempotencyKey, r.AuthorizationID, gateway.ErrNotFound)
	}
	notDone := fmt.Errorf("gateway %s: %s %q: payment %s is %s: %w", g.name, op, r.IdempotencyKey, p.ID, p.Status, gateway.ErrNotFound)
	switch op {
	case gateway.OpAuthorize:
		return g.authorizeResult(r.IdempotencyKey, *p)
	case gateway.OpCapture:
		if p.Status != statusSucceeded && p.Status != statusCanceled {
			return gateway.Result{}, notDone
		}
		return g.captureResult(r.IdempotencyKey, *p)
	default:
		if p.Status != statusCanceled {
			return gateway.Result{}, notDone
		}
		return g.voidResult(r.IdempotencyKey, *p)
	}
}

// Operations lists what the shop did on the UTC day containing day, oldest
// first: the hold (or decline) of every payment created that day, keyed by
// rebill's key from its metadata; the capture of every payment captured
// that day; and the release of every payment created that day and voided
// (YooKassa keeps no cancellation time). Captures and voids carry the
// payment id as Reference but no key: the key of a later call is not on
// the payment.
func (g *Gateway) Operations(ctx context.Context, day time.Time) ([]gateway.Result, error) {
	y, m, d := day.UTC().Date()
	from := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 1)
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	created, err := g.list(ctx, "created_at", from, to, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: payments created on %s: %w", g.name, from.Format(time.DateOnly), err)
	}
	captured, err := g.list(ctx, "captured_at", from, to, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: payments captured on %s: %w", g.name, from.Format(time.DateOnly), err)
	}
	var out []gateway.Result
	for _, p := range created {
		res, err := g.authorizeResult(p.Metadata[metaGatewayKey], p)
		if err != nil {
			continue // still pending: its outcome belongs to a later listing
		}
		out = append(out, res)
		if p.reason() == reasonCanceledByMerchant {
			res.Op, res.IdempotencyKey = gateway.OpVoid, ""
			out = append(out, res)
		}
	}
	for _, p := range captured {
		if res, err := g.captureResult("", p); err == nil {
			out = append(out, res)
		}
	}
	slices.SortStableFunc(out, func(a, b gateway.Result) int { return a.At.Compare(b.At) })
	return out, nil
}

// scan returns the payments created in [from, to) that match wants.
func (g *Gateway) scan(ctx context.Context, from, to time.Time, wants func(payment) bool) ([]payment, error) {
	return g.list(ctx, "created_at", from, to, wants)
}

// list pages through GET /payments?<field>.gte=from&<field>.lt=to, keeping
// the payments that match wants (all when nil).
func (g *Gateway) list(ctx context.Context, field string, from, to time.Time, wants func(payment) bool) ([]payment, error) {
	q := url.Values{}
	q.Set(field+".gte", from.UTC().Format(time.RFC3339Nano))
	q.Set(field+".lt", to.UTC().Format(time.RFC3339Nano))
	q.Set("limit", fmt.Sprint(listPageSize))
	var out []payment
	for {
		var page paymentList
		if err := g.call(ctx, http.MethodGet, "/payments?"+q.Encode(), "", nil, &page); err != nil {
			return nil, err
		}
		for _, p := range page.Items {
			if wants == nil || wants(p) {
				out = append(out, p)
			}
		}
		if page.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// result is the part of a result every operation shares.
func (g *Gateway) result(op gateway.Op, key string, p payment) (gateway.Result, error) {
	minor, err := parseAmount(p.Amount.Value, p.Amount.Currency)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("%w: payment %s: %w", gateway.ErrUnknownOutcome, p.ID, err)
	}
	return gateway.Result{Op: op, IdempotencyKey: key, Reference: p.ID, Amount: minor, Currency: p.Amount.Currency,
		At: p.CreatedAt.UTC()}, nil
}

// failed is the result of a request YooKassa refused, or that could not
// be written: sending it again cannot help.
func (g *Gateway) failed(op gateway.Op, req gateway.Request, code string) gateway.Result {
	if code == "" {
		code = "refused"
	}
	return gateway.Result{Op: op, IdempotencyKey: req.IdempotencyKey, Reference: req.AuthorizationID,
		Status: gateway.StatusFailed, DeclineCode: code, Amount: req.Amount, Currency: req.Currency, At: g.clock.Now()}
}

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
