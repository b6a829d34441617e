package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/rebill/rebill/charges/gateway"
)

// hardDeclines are the decline codes after which no retry of the card can
// succeed. Every other code is soft: dunning tries again.
var hardDeclines = map[string]bool{
	"stolen_card":  true,
	"lost_card":    true,
	"expired_card": true,
	"pickup_card":  true,
}

// authenticationRequired: the issuer wants the customer present (3-D
// Secure); an off-session retry cannot pass, the customer must act.
const authenticationRequired = "authentication_required"

// fromIntent reads op's outcome from a PaymentIntent (the table in the
// package doc). at is when the op happened when the caller knows it (an
// answer to the op itself); zero means the PaymentIntent's own times.
// Returns gateway.ErrNotFound when the PaymentIntent shows op never
// happened, gateway.ErrUnknownOutcome while it is unsettled.
func fromIntent(op gateway.Op, key string, pi *stripeapi.PaymentIntent, at time.Time) (gateway.Result, error) {
	res := gateway.Result{Op: op, IdempotencyKey: key, Reference: pi.ID, Status: gateway.StatusSucceeded,
		Amount: pi.Amount, Currency: strings.ToUpper(string(pi.Currency)), At: at}
	if res.At.IsZero() {
		res.At = time.Unix(pi.Created, 0).UTC()
	}
	declined := pi.LastPaymentError != nil
	switch {
	case pi.Status == stripeapi.PaymentIntentStatusProcessing:
		return gateway.Result{}, fmt.Errorf("%w: PaymentIntent %s is still processing", gateway.ErrUnknownOutcome, pi.ID)
	case op == gateway.OpAuthorize && (pi.Status == stripeapi.PaymentIntentStatusRequiresCapture ||
		pi.Status == stripeapi.PaymentIntentStatusSucceeded ||
		pi.Status == stripeapi.PaymentIntentStatusCanceled && !declined):
		return res, nil
	case op == gateway.OpAuthorize && (pi.Status == stripeapi.PaymentIntentStatusRequiresPaymentMethod ||
		pi.Status == stripeapi.PaymentIntentStatusCanceled):
		return decline(res, declineCode(pi.LastPaymentError)), nil
	case op == gateway.OpAuthorize && pi.Status == stripeapi.PaymentIntentStatusRequiresAction:
		return decline(res, authenticationRequired), nil
	case op == gateway.OpCapture && pi.Status == stripeapi.PaymentIntentStatusSucceeded:
		res.Amount = pi.AmountReceived
		return res, nil
	case op == gateway.OpVoid && pi.Status == stripeapi.PaymentIntentStatusCanceled:
		if at.IsZero() && pi.CanceledAt != 0 {
			res.At = time.Unix(pi.CanceledAt, 0).UTC()
		}
		return res, nil
	case op != gateway.OpAuthorize && (pi.Status == stripeapi.PaymentIntentStatusRequiresCapture ||
		pi.Status == stripeapi.PaymentIntentStatusSucceeded ||
		pi.Status == stripeapi.PaymentIntentStatusCanceled ||
		pi.Status == stripeapi.PaymentIntentStatusRequiresPaymentMethod):
		return gateway.Result{}, fmt.Errorf("PaymentIntent %s is %s: %w", pi.ID, pi.Status, gateway.ErrNotFound)
	}
	return gateway.Result{}, fmt.Errorf("%w: PaymentIntent %s is %s", gateway.ErrUnknownOutcome, pi.ID, pi.Status)
}

// decline turns res into the verdict for a decline code: hard, soft, or a
// failure that needs the customer.
func decline(res gateway.Result, code string) gateway.Result {
	res.DeclineCode = code
	switch {
	case code == authenticationRequired:
		res.Status, res.Hard = gateway.StatusFailed, true
	default:
		res.Status, res.Hard = gateway.StatusDeclined, hardDeclines[code]
	}
	return res
}

// declineCode is the issuer's code of a card error: its decline code, else
// its error code (expired_card comes as a code), else generic_decline.
func declineCode(e *stripeapi.Error) string {
	switch {
	case e == nil:
		return "generic_decline"
	case e.Code == stripeapi.ErrorCodeAuthenticationRequired:
		return authenticationRequired
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "" && e.Code != stripeapi.ErrorCodeCardDeclined:
		return string(e.Code)
	}
	return "generic_decline"
}

// answerError turns a failed call into a verdict when Stripe answered one
// (a card error, a refused request), and otherwise into a classified
// error.
func (g *Gateway) answerError(op gateway.Op, req gateway.Request, err error) (gateway.Result, error) {
	var se *stripeapi.Error
	if !errors.As(err, &se) {
		return gateway.Result{}, classify(err)
	}
	res := gateway.Result{Op: op, IdempotencyKey: req.IdempotencyKey, Amount: req.Amount, Currency: req.Currency, At: g.clock.Now()}
	if se.PaymentIntent != nil {
		res.Reference = se.PaymentIntent.ID
	}
	switch {
	case se.Type == stripeapi.ErrorTypeCard || se.HTTPStatusCode == http.StatusPaymentRequired:
		res = decline(res, declineCode(se))
		if op != gateway.OpAuthorize {
			res.Status, res.Hard = gateway.StatusFailed, true
		}
		return res, nil
	case se.Type == stripeapi.ErrorTypeInvalidRequest &&
		(se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound):
		code := string(se.Code)
		if code == "" {
			code = "invalid_request"
		}
		return refused(op, req, code, res.At), nil
	}
	return gateway.Result{}, classify(err)
}

// classify says whether a call that got no verdict may have been acted on:
// gateway.ErrUnavailable when Stripe certainly did nothing,
// gateway.ErrUnknownOutcome when it may have. Errors describe Stripe's
// answer by status, type, code and request id, never by its message,
// which may quote the payment method.
func classify(err error) error {
	var ce *callError
	errors.As(err, &ce)
	var se *stripeapi.Error
	if errors.As(err, &se) {
		d := describe(se)
		switch {
		case se.Type == stripeapi.ErrorTypeIdempotency || se.Code == stripeapi.ErrorCodeIdempotencyKeyInUse:
			return fmt.Errorf("%w: %s: the key's first request is still running", gateway.ErrUnknownOutcome, d)
		case se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: %s: Stripe refused the API key", gateway.ErrUnavailable, d)
		case se.HTTPStatusCode == http.StatusTooManyRequests || se.HTTPStatusCode == http.StatusServiceUnavailable:
			return fmt.Errorf("%w: %s", gateway.ErrUnavailable, d)
		case se.HTTPStatusCode >= 500:
			return fmt.Errorf("%w: %s", gateway.ErrUnknownOutcome, d)
		}
		return fmt.Errorf("refused: %s", d)
	}
	if ce == nil {
		return fmt.Errorf("%w: %w", gateway.ErrUnknownOutcome, err)
	}
	switch {
	case ce.status == http.StatusTooManyRequests || ce.status == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: answered %d with a body that is not Stripe's", gateway.ErrUnavailable, ce.status)
	// stripe-go quotes the body of an answer it cannot read, which may
	// name the payment method: the error keeps only the status.
	case ce.status >= 500 || (ce.status != 0 && ce.status < 300):
		return fmt.Errorf("%w: answered %d, unreadable", gateway.ErrUnknownOutcome, ce.status)
	case ce.status != 0:
		return fmt.Errorf("refused: answered %d with a body that is not Stripe's", ce.status)
	case !ce.sent:
		return fmt.Errorf("%w: request not sent: %w", gateway.ErrUnavailable, ce.err)
	}
	return fmt.Errorf("%w: %w", gateway.ErrUnknownOutcome, ce.err)
}

// describe names a Stripe error without its message.
func describe(se *stripeapi.Error) string {
	s := fmt.Sprintf("Stripe answered %d %s", se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		s += " " + string(se.Code)
	}
	if se.DeclineCode != "" {
		s += " " + string(se.DeclineCode)
	}
	if se.RequestID != "" {
		s += " (request " + se.RequestID + ")"
	}
	return s
}

// callError is a failed call with what its trace saw.
type callError struct {
	err    error
	sent   bool // a request's headers were written
	status int  // the last response's status; 0 when none came
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// trace records, for one call, whether a request left and what status
// came back: stripe-go reports neither for an answer it cannot decode or a
// connection that fails.
type trace struct {
	sent   atomic.Bool
	status atomic.Int32
}

type traceKey struct{}

func withTrace(ctx context.Context, t *trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// tracingTransport fills the trace of the call a request belongs to.
type tracingTransport struct{ base http.RoundTripper }

func (t tracingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tr, _ := r.Context().Value(traceKey{}).(*trace)
	if tr == nil {
		return t.base.RoundTrip(r)
	}
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() { tr.sent.Store(true) }})
	resp, err := t.base.RoundTrip(r.WithContext(ctx))
	if resp != nil {
		tr.status.Store(int32(resp.StatusCode))
	}
	return resp, err
}
