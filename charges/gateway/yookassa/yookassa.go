package yookassa

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
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
