package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/clock"
)

// ReplayWindow is how long after its first send a lost authorize may be
// replayed under its key. Stripe keeps idempotency keys for 24 hours; the
// hour of margin covers the skew between rebill's clock and Stripe's.
const ReplayWindow = 23 * time.Hour

// listCalls is how many call timeouts a day's listing may take.
const listCalls = 30

// defaultTimeout bounds a call when Config.Timeout is zero.
const defaultTimeout = 10 * time.Second

// Metadata keys rebill writes on its PaymentIntents, for people reading the
// dashboard and for reconciliation.
const (
	metaChargeKey    = "rebill_charge_key"
	metaAuthorizeKey = "rebill_authorize_key"
	metaCaptureKey   = "rebill_capture_key"
)

// Config is one Stripe account as the gateways file describes it.
type Config struct {
	Name string
	// BaseURL is Stripe's API root; empty means https://api.stripe.com.
	BaseURL string
	// APIKey is the secret key, read by the caller from the environment
	// variable the gateways file names.
	APIKey string
	// Timeout bounds each call; past it the outcome is unknown. Default 10s.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means one that keeps enough idle
	// connections for many concurrent calls. Its Transport is wrapped, not
	// changed.
	HTTPClient *http.Client
	// Clock says how old a lost authorize is (see [ReplayWindow]).
	Clock clock.Clock
}

// Gateway is a [gateway.Gateway] backed by one Stripe account. It has its
// own client and key: it never touches stripe-go's global key or backends,
// so several accounts live side by side.
type Gateway struct {
	name    string
	client  *stripeapi.Client
	timeout time.Duration
	clock   clock.Clock
}

var _ gateway.Gateway = (*Gateway)(nil)

// New returns the gateway for cfg's account. It checks cfg without calling
// Stripe.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("stripe gateway: name is empty")
	case cfg.APIKey == "":
		return nil, fmt.Errorf("stripe gateway %s: API key is empty", cfg.Name)
	case cfg.Clock == nil:
		return nil, fmt.Errorf("stripe gateway %s: no clock", cfg.Name)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("stripe gateway %s: timeout %s is negative", cfg.Name, cfg.Timeout)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" {
		base = stripeapi.APIURL
	}
	if !strings.HasPrefix(base, "https://") && !strings.HasPrefix(base, "http://") {
		return nil, fmt.Errorf("stripe gateway %s: base URL must start with https:// or http://", cfg.Name)
	}
	hc := http.Client{}
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	if hc.Transport == nil {
		hc.Transport = gateway.Transport()
	}
	hc.Transport = tracingTransport{base: hc.Transport}
	backend := stripeapi.GetBackendWithConfig(stripeapi.APIBackend, &stripeapi.BackendConfig{
		HTTPClient:        &hc,
		URL:               stripeapi.String(base),
		MaxNetworkRetries: stripeapi.Int64(0),
		// stripe-go logs request paths and error bodies; rebill logs its
		// own outcomes and keeps Stripe's bodies out of its logs.
		LeveledLogger: &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	})
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	return &Gateway{
		name:    cfg.Name,
		client:  stripeapi.NewClient(cfg.APIKey, stripeapi.WithBackends(&stripeapi.Backends{API: backend})),
		timeout: timeout,
		clock:   cfg.Clock,
	}, nil
}

// Name returns the configured gateway name.
func (g *Gateway) Name() string { return g.name }

// tokenShape is "<customer id>/<payment method id>".
var tokenShape = regexp.MustCompile(`^cus_[A-Za-z0-9_]+/(pm|card|src)_[A-Za-z0-9_]+$`)

// Authorize places a hold: a PaymentIntent confirmed off-session with
// manual capture.
func (g *Gateway) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	res, err := g.authorize(ctx, req)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("stripe gateway %s: authorize %q: %w", g.name, req.IdempotencyKey, err)
	}
	return res, nil
}

func (g *Gateway) authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	if !tokenShape.MatchString(req.Token) {
		return refused(gateway.OpAuthorize, req, "invalid_token", g.clock.Now()), nil
	}
	customer, method, _ := strings.Cut(req.Token, "/")
	params := &stripeapi.PaymentIntentCreateParams{
		Amount:             stripeapi.Int64(req.Amount),
		Currency:           stripeapi.String(strings.ToLower(req.Currency)),
		Customer:           stripeapi.String(customer),
		PaymentMethod:      stripeapi.String(method),
		PaymentMethodTypes: []*string{stripeapi.String("card")},
		CaptureMethod:      stripeapi.String(string(stripeapi.PaymentIntentCaptureMethodManual)),
		Confirm:            stripeapi.Bool(true),
		OffSession:         stripeapi.Bool(true),
		Metadata:           map[string]string{metaChargeKey: req.ChargeKey, metaAuthorizeKey: req.IdempotencyKey},
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	var pi *stripeapi.PaymentIntent
	err := g.do(ctx, func(ctx context.Context) (err error) {
		pi, err = g.client.V1PaymentIntents.Create(ctx, params)
		return err
	})
	if se := keyReusedError(err); se != nil {
		return g.authorizeKeyReused(ctx, req, customer, se)
	}
	if err != nil {
		return g.answerError(gateway.OpAuthorize, req, err)
	}
	return fromIntent(gateway.OpAuthorize, req.IdempotencyKey, pi, g.clock.Now())
}

// keyReusedError is Stripe's refusal of a key first sent with other
// parameters (400 idempotency_error), or nil: not the 409 of a key whose
// first request is still running, which is an unknown outcome.
func keyReusedError(err error) *stripeapi.Error {
	var se *stripeapi.Error
	if errors.As(err, &se) && se.Type == stripeapi.ErrorTypeIdempotency && se.Code != stripeapi.ErrorCodeIdempotencyKeyInUse {
		return se
	}
	return nil
}

// authorizeKeyReused answers a hold Stripe refused because its key was
// first sent with other parameters: a charge restored from a backup that
// asks again with another card, after the customer changed it. That is
// not an unknown outcome: the key's first request made a PaymentIntent
// carrying the key in its metadata, which the customer's PaymentIntents
// list (consistent with Stripe's writes, unlike Search) shows. It is the
// answer when it holds the money asked; one of another amount is money
// rebill did not ask for in this form, and none means the key held
// nothing yet cannot be sent again: both are gateway.ErrKeyReused, for a
// person.
func (g *Gateway) authorizeKeyReused(ctx context.Context, req gateway.Request, customer string, se *stripeapi.Error) (gateway.Result, error) {
	found, err := g.intentsByKey(ctx, customer, req.IdempotencyKey)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("%s, and the customer's PaymentIntents could not be read: %w", describe(se), err)
	}
	switch len(found) {
	case 0:
		return gateway.Result{}, fmt.Errorf("%s, and no PaymentIntent of the customer carries the key: %w", describe(se), gateway.ErrKeyReused)
	case 1:
		pi := found[0]
		if pi.Amount != req.Amount || !strings.EqualFold(string(pi.Currency), req.Currency) {
			return gateway.Result{}, fmt.Errorf("%s: the key's PaymentIntent %s is of %d %s, not %d %s: %w", describe(se), pi.ID,
				pi.Amount, strings.ToUpper(string(pi.Currency)), req.Amount, req.Currency, gateway.ErrKeyReused)
		}
		return fromIntent(gateway.OpAuthorize, req.IdempotencyKey, pi, time.Time{})
	}
	return gateway.Result{}, fmt.Errorf("%s, and %d PaymentIntents carry the key: %w", describe(se), len(found), gateway.ErrUnprovable)
}

// intentsByKey lists customer's PaymentIntents (all pages) and keeps those
// whose hold was sent under key.
func (g *Gateway) intentsByKey(ctx context.Context, customer, key string) ([]*stripeapi.PaymentIntent, error) {
	params := &stripeapi.PaymentIntentListParams{Customer: stripeapi.String(customer)}
	params.Limit = stripeapi.Int64(100)
	ctx, cancel := context.WithTimeout(ctx, listCalls*g.timeout)
	defer cancel()
	var found []*stripeapi.PaymentIntent
	err := traced(ctx, func(ctx context.Context) error {
		for pi, err := range g.client.V1PaymentIntents.List(ctx, params) {
			if err != nil {
				return err
			}
			if pi.Metadata[metaAuthorizeKey] == key {
				found = append(found, pi)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("PaymentIntents of the customer: %w", classify(err))
	}
	return found, nil
}

// settleKeyReused answers a capture or void Stripe refused because its
// key was first sent with other parameters (another amount to capture):
// the PaymentIntent the call names says what the key did. Its op done for
// the money asked is the answer; anything else is gateway.ErrKeyReused.
func (g *Gateway) settleKeyReused(ctx context.Context, op gateway.Op, req gateway.Request, se *stripeapi.Error) (gateway.Result, error) {
	res, err := g.lookup(ctx, gateway.LookupRequest{Op: op, Request: req})
	if errors.Is(err, gateway.ErrNotFound) {
		return gateway.Result{}, fmt.Errorf("%s, and %w: %w", describe(se), err, gateway.ErrKeyReused)
	}
	if err != nil {
		return gateway.Result{}, fmt.Errorf("%s, and the PaymentIntent could not be read: %w", describe(se), err)
	}
	if op == gateway.OpCapture && res.Amount != req.Amount {
		return gateway.Result{}, fmt.Errorf("%s: PaymentIntent %s captured %d, not %d: %w", describe(se), res.Reference,
			res.Amount, req.Amount, gateway.ErrKeyReused)
	}
	return res, nil
}

// Capture collects the hold named by req.AuthorizationID, for req.Amount.
func (g *Gateway) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	if req.AuthorizationID == "" {
		return refused(gateway.OpCapture, req, "missing_authorization", g.clock.Now()), nil
	}
	params := &stripeapi.PaymentIntentCaptureParams{
		AmountToCapture: stripeapi.Int64(req.Amount),
		Metadata:        map[string]string{metaCaptureKey: req.IdempotencyKey},
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	var pi *stripeapi.PaymentIntent
	err := g.do(ctx, func(ctx context.Context) (err error) {
		pi, err = g.client.V1PaymentIntents.Capture(ctx, req.AuthorizationID, params)
		return err
	})
	var res gateway.Result
	if se := keyReusedError(err); se != nil {
		res, err = g.settleKeyReused(ctx, gateway.OpCapture, req, se)
	} else {
		res, err = g.settle(gateway.OpCapture, req, pi, err)
	}
	if err != nil {
		return gateway.Result{}, fmt.Errorf("stripe gateway %s: capture %q of %s: %w", g.name, req.IdempotencyKey, req.AuthorizationID, err)
	}
	return res, nil
}

// Void releases the hold named by req.AuthorizationID.
func (g *Gateway) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	if req.AuthorizationID == "" {
		return refused(gateway.OpVoid, req, "missing_authorization", g.clock.Now()), nil
	}
	params := &stripeapi.PaymentIntentCancelParams{
		CancellationReason: stripeapi.String(string(stripeapi.PaymentIntentCancellationReasonAbandoned)),
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	var pi *stripeapi.PaymentIntent
	err := g.do(ctx, func(ctx context.Context) (err error) {
		pi, err = g.client.V1PaymentIntents.Cancel(ctx, req.AuthorizationID, params)
		return err
	})
	var res gateway.Result
	if se := keyReusedError(err); se != nil {
		res, err = g.settleKeyReused(ctx, gateway.OpVoid, req, se)
	} else {
		res, err = g.settle(gateway.OpVoid, req, pi, err)
	}
	if err != nil {
		return gateway.Result{}, fmt.Errorf("stripe gateway %s: void %q of %s: %w", g.name, req.IdempotencyKey, req.AuthorizationID, err)
	}
	return res, nil
}

// settle reads a capture's or void's answer. A 200 whose PaymentIntent does
// not show the op done cannot be: it is reported as unknown, never as done.
func (g *Gateway) settle(op gateway.Op, req gateway.Request, pi *stripeapi.PaymentIntent, err error) (gateway.Result, error) {
	if err != nil {
		return g.answerError(op, req, err)
	}
	res, err := fromIntent(op, req.IdempotencyKey, pi, g.clock.Now())
	if errors.Is(err, gateway.ErrNotFound) {
		return gateway.Result{}, fmt.Errorf("%w: answered 200 with PaymentIntent %s %s", gateway.ErrUnknownOutcome, pi.ID, pi.Status)
	}
	return res, err
}

// Lookup reports what became of req's operation. With a reference it reads
// the PaymentIntent; a lost authorize without one is replayed under its
// key while Stripe still remembers the key (see [ReplayWindow]), and is
// [gateway.ErrUnprovable] after.
func (g *Gateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	res, err := g.lookup(ctx, req)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("stripe gateway %s: look up %s %q: %w", g.name, req.Op, req.Request.IdempotencyKey, err)
	}
	return res, nil
}

func (g *Gateway) lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	if req.Op == gateway.OpRefund {
		return g.lookupRefund(ctx, req)
	}
	ref := req.Request.AuthorizationID
	if ref == "" {
		if req.Op != gateway.OpAuthorize {
			return gateway.Result{}, fmt.Errorf("no PaymentIntent to %s was ever named: %w", req.Op, gateway.ErrNotFound)
		}
		if !req.MayReplay {
			return gateway.Result{}, fmt.Errorf("only a replay of the create could tell, and this look may not send one: %w", gateway.ErrUnprovable)
		}
		if req.SentAt.IsZero() {
			return gateway.Result{}, fmt.Errorf("the first send's time is not known, so a replay may not be safe: %w", gateway.ErrUnprovable)
		}
		if age := g.clock.Now().Sub(req.SentAt); age > ReplayWindow {
			return gateway.Result{}, fmt.Errorf("first sent %s ago, past the %s in which Stripe replays a key: %w",
				age.Round(time.Minute), ReplayWindow, gateway.ErrUnprovable)
		}
		return g.authorize(ctx, req.Request)
	}
	var pi *stripeapi.PaymentIntent
	err := g.do(ctx, func(ctx context.Context) (err error) {
		pi, err = g.client.V1PaymentIntents.Retrieve(ctx, ref, nil)
		return err
	})
	if err != nil {
		var se *stripeapi.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			// A reference Stripe does not know (another account's key?)
			// proves nothing about the op: not ErrNotFound.
			return gateway.Result{}, fmt.Errorf("PaymentIntent %s: %s", ref, describe(se))
		}
		return gateway.Result{}, classify(err)
	}
	if owner := pi.Metadata[metaChargeKey]; owner != "" && owner != req.Request.ChargeKey {
		// A reference that names another charge's hold must not settle
		// this one.
		return gateway.Result{}, fmt.Errorf("PaymentIntent %s belongs to charge %s", ref, owner)
	}
	return fromIntent(req.Op, req.Request.IdempotencyKey, pi, time.Time{})
}

// Operations lists the operations on the PaymentIntents created on the UTC
// day containing day, and the refunds created that day, oldest first.
func (g *Gateway) Operations(ctx context.Context, day time.Time) ([]gateway.Result, error) {
	start := day.UTC().Truncate(24 * time.Hour)
	params := &stripeapi.PaymentIntentListParams{
		CreatedRange: &stripeapi.RangeQueryParams{
			GreaterThanOrEqual: start.Unix(),
			LesserThan:         start.Add(24 * time.Hour).Unix(),
		},
	}
	params.Limit = stripeapi.Int64(100)
	// A day may span many pages of 100: the listing gets listCalls call
	// timeouts in all.
	ctx, cancel := context.WithTimeout(ctx, listCalls*g.timeout)
	defer cancel()
	var results []gateway.Result
	err := traced(ctx, func(ctx context.Context) error {
		for pi, err := range g.client.V1PaymentIntents.List(ctx, params) {
			if err != nil {
				return err
			}
			results = append(results, operations(pi)...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stripe gateway %s: list operations of %s: %w", g.name, start.Format(time.DateOnly), classify(err))
	}
	refunds, err := g.refundOperations(ctx, start)
	if err != nil {
		return nil, fmt.Errorf("stripe gateway %s: list operations of %s: %w", g.name, start.Format(time.DateOnly), err)
	}
	results = append(results, refunds...)
	slices.SortStableFunc(results, func(a, b gateway.Result) int { return a.At.Compare(b.At) })
	return results, nil
}

// operations are the ops one PaymentIntent records.
func operations(pi *stripeapi.PaymentIntent) []gateway.Result {
	auth, err := fromIntent(gateway.OpAuthorize, pi.Metadata[metaAuthorizeKey], pi, time.Time{})
	if err != nil {
		return nil // still processing: the next day's run sees it settled
	}
	out := []gateway.Result{auth}
	if capture, err := fromIntent(gateway.OpCapture, pi.Metadata[metaCaptureKey], pi, time.Time{}); err == nil {
		out = append(out, capture)
	}
	if void, err := fromIntent(gateway.OpVoid, "", pi, time.Time{}); err == nil {
		out = append(out, void)
	}
	return out
}

// do runs one API call under the gateway's timeout, tracing whether its
// request left and what status came back (see classify).
func (g *Gateway) do(ctx context.Context, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return traced(ctx, call)
}

func traced(ctx context.Context, call func(ctx context.Context) error) error {
	t := &trace{}
	err := call(withTrace(ctx, t))
	if err != nil {
		return &callError{err: err, sent: t.sent.Load(), status: int(t.status.Load())}
	}
	return nil
}

// refused is the Result of a request the adapter or Stripe refused.
func refused(op gateway.Op, req gateway.Request, code string, at time.Time) gateway.Result {
	return gateway.Result{Op: op, IdempotencyKey: req.IdempotencyKey, Status: gateway.StatusFailed, DeclineCode: code,
		Hard: true, Amount: req.Amount, Currency: req.Currency, At: at}
}
