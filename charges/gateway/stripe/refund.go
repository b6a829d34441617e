package stripe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/rebill/rebill/charges/gateway"
)

// metaRefundKey is the metadata key under which a refund carries rebill's
// key for it: Stripe keeps no index by idempotency key, and a payment's
// refunds are told apart by it.
const metaRefundKey = "rebill_refund_key"

// refundReason is the reason Stripe records for a refund: the one support
// chose (Stripe's own set, https://docs.stripe.com/api/refunds/create:
// duplicate, fraudulent, requested_by_customer; "fraudulent" also feeds
// Radar's block lists), or requested_by_customer when the request names
// none of them.
func refundReason(req gateway.Request) string {
	switch req.RefundReason {
	case "duplicate", "fraudulent", "requested_by_customer":
		return req.RefundReason
	}
	return "requested_by_customer"
}

// Refund returns req.Amount of the PaymentIntent named by
// req.AuthorizationID: POST /v1/refunds with payment_intent, amount,
// reason and metadata naming the charge and the refund's key, under the
// refund's key as Idempotency-Key (https://docs.stripe.com/api/refunds/create,
// https://docs.stripe.com/api/idempotent_requests). The Result's Reference is
// the refund's id (re_…). Stripe files no fiscal receipt: req.Receipt is
// not sent.
func (g *Gateway) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	res, err := g.refund(ctx, req)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("stripe gateway %s: refund %q of %s: %w", g.name, req.IdempotencyKey, req.AuthorizationID, err)
	}
	return res, nil
}

func (g *Gateway) refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	switch {
	case req.AuthorizationID == "":
		return refused(gateway.OpRefund, req, "missing_authorization", g.clock.Now()), nil
	case req.Amount <= 0:
		return refused(gateway.OpRefund, req, "invalid_amount", g.clock.Now()), nil
	}
	params := &stripeapi.RefundCreateParams{
		PaymentIntent: stripeapi.String(req.AuthorizationID),
		Amount:        stripeapi.Int64(req.Amount),
		Reason:        stripeapi.String(refundReason(req)),
		Metadata:      map[string]string{metaChargeKey: req.ChargeKey, metaRefundKey: req.IdempotencyKey},
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	var re *stripeapi.Refund
	err := g.do(ctx, func(ctx context.Context) (err error) {
		re, err = g.client.V1Refunds.Create(ctx, params)
		return err
	})
	if se := keyReusedError(err); se != nil {
		return g.keyReused(ctx, req, se)
	}
	if err != nil {
		res, err := g.answerError(gateway.OpRefund, req, err)
		res.Reference = "" // answerError names the PaymentIntent; no refund was made
		return res, err
	}
	return fromRefund(req.IdempotencyKey, re)
}

// keyReused answers a refund whose key Stripe had seen with other
// parameters (400 idempotency_error). Unlike a lost hold, this is not an
// unknown outcome: whatever the key's first request did is on the
// payment's refunds, which Stripe lists consistently. A refund carrying
// the key with this request's amount is the answer; one with another
// amount is a conflict a person must settle (the money it moved is not
// what rebill asks); none means the key moved no money and this request
// was refused.
func (g *Gateway) keyReused(ctx context.Context, req gateway.Request, se *stripeapi.Error) (gateway.Result, error) {
	found, err := g.refundsByKey(ctx, req.AuthorizationID, req.IdempotencyKey)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("%s, and the payment's refunds could not be read: %w", describe(se), err)
	}
	switch len(found) {
	case 0:
		return refused(gateway.OpRefund, req, "idempotency_key_reused", g.clock.Now()), nil
	case 1:
		re := found[0]
		if re.Amount != req.Amount || !strings.EqualFold(string(re.Currency), req.Currency) {
			return gateway.Result{}, fmt.Errorf("%s: the key's refund %s is of %d %s, not %d %s: a person must reconcile it",
				describe(se), re.ID, re.Amount, strings.ToUpper(string(re.Currency)), req.Amount, req.Currency)
		}
		return fromRefund(req.IdempotencyKey, re)
	}
	return gateway.Result{}, fmt.Errorf("%s, and %d refunds carry the key: %w", describe(se), len(found), gateway.ErrUnprovable)
}

// lookupRefund finds a refund by its key among its payment's refunds.
// Stripe's lists are consistent with its writes (unlike Search,
// https://docs.stripe.com/search): a refund that is not
// listed was not made, and the caller may send it again under its key.
// No replay is ever needed, so none is sent, whatever MayReplay says. A
// look by key alone (no payment named) cannot tell which payment's
// refunds to read: ErrUnprovable, never "not found".
func (g *Gateway) lookupRefund(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	r := req.Request
	if r.AuthorizationID == "" {
		return gateway.Result{}, fmt.Errorf("a refund is found through its PaymentIntent, and none was named: %w", gateway.ErrUnprovable)
	}
	found, err := g.refundsByKey(ctx, r.AuthorizationID, r.IdempotencyKey)
	if err != nil {
		return gateway.Result{}, err
	}
	switch len(found) {
	case 0:
		return gateway.Result{}, fmt.Errorf("PaymentIntent %s has no refund under the key: %w", r.AuthorizationID, gateway.ErrNotFound)
	case 1:
		return fromRefund(r.IdempotencyKey, found[0])
	}
	// Only a resend after Stripe forgot the key makes two: money went back
	// twice, which a person must see.
	return gateway.Result{}, fmt.Errorf("%d refunds of PaymentIntent %s carry the key: %w", len(found), r.AuthorizationID, gateway.ErrUnprovable)
}

// refundsByKey lists the refunds of PaymentIntent pi (all pages) and keeps
// those carrying key. A PaymentIntent Stripe does not know proves nothing
// (another account's reference?): an error, not an empty list.
func (g *Gateway) refundsByKey(ctx context.Context, pi, key string) ([]*stripeapi.Refund, error) {
	params := &stripeapi.RefundListParams{PaymentIntent: stripeapi.String(pi)}
	params.Limit = stripeapi.Int64(100)
	ctx, cancel := context.WithTimeout(ctx, listCalls*g.timeout)
	defer cancel()
	var found []*stripeapi.Refund
	err := traced(ctx, func(ctx context.Context) error {
		for re, err := range g.client.V1Refunds.List(ctx, params) {
			if err != nil {
				return err
			}
			if re.Metadata[metaRefundKey] == key {
				found = append(found, re)
			}
		}
		return nil
	})
	if err != nil {
		var se *stripeapi.Error
		if errors.As(err, &se) && se.HTTPStatusCode == 404 {
			return nil, fmt.Errorf("refunds of PaymentIntent %s: %s", pi, describe(se))
		}
		return nil, fmt.Errorf("refunds of PaymentIntent %s: %w", pi, classify(err))
	}
	return found, nil
}

// refundOperations lists the refunds created on the UTC day from start,
// whoever made them: one made in the dashboard shows with no key, for
// reconciliation to report.
func (g *Gateway) refundOperations(ctx context.Context, start time.Time) ([]gateway.Result, error) {
	params := &stripeapi.RefundListParams{CreatedRange: &stripeapi.RangeQueryParams{
		GreaterThanOrEqual: start.Unix(),
		LesserThan:         start.Add(24 * time.Hour).Unix(),
	}}
	params.Limit = stripeapi.Int64(100)
	var out []gateway.Result
	err := traced(ctx, func(ctx context.Context) error {
		for re, err := range g.client.V1Refunds.List(ctx, params) {
			if err != nil {
				return err
			}
			if res, err := fromRefund(re.Metadata[metaRefundKey], re); err == nil {
				out = append(out, res)
			} // still pending: a later listing sees it settled
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("refunds: %w", classify(err))
	}
	return out, nil
}

// fromRefund reads a refund's outcome from its status
// (https://docs.stripe.com/api/refunds/object: pending, requires_action,
// succeeded, failed, canceled). A failed or canceled refund returned
// nothing: StatusFailed, with Stripe's failure_reason (lost_or_stolen_card,
// expired_or_canceled_card, unknown) as the code. A pending one (or one
// that requires action) may still fail: its outcome is unknown until it
// settles. Stripe may fail a card refund after it succeeded
// (https://docs.stripe.com/refunds#failed-refunds): a later look-up or
// listing then reads it failed.
func fromRefund(key string, re *stripeapi.Refund) (gateway.Result, error) {
	res := gateway.Result{Op: gateway.OpRefund, IdempotencyKey: key, Reference: re.ID, Amount: re.Amount,
		Currency: strings.ToUpper(string(re.Currency)), At: time.Unix(re.Created, 0).UTC()}
	switch re.Status {
	case stripeapi.RefundStatusSucceeded:
		res.Status = gateway.StatusSucceeded
		return res, nil
	case stripeapi.RefundStatusFailed:
		res.Status, res.Hard, res.DeclineCode = gateway.StatusFailed, true, string(re.FailureReason)
		if res.DeclineCode == "" {
			res.DeclineCode = "refund_failed"
		}
		return res, nil
	case stripeapi.RefundStatusCanceled:
		res.Status, res.Hard, res.DeclineCode = gateway.StatusFailed, true, "refund_canceled"
		return res, nil
	}
	return gateway.Result{}, fmt.Errorf("%w: refund %s is %s", gateway.ErrUnknownOutcome, re.ID, re.Status)
}
