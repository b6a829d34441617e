package yookassa

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// Refund statuses of API v3 (https://yookassa.ru/developers/api#refund_object):
// a refund is pending until the payment network answers, then succeeded
// or canceled (with cancellation_details).
const (
	refundPending   = "pending"
	refundSucceeded = "succeeded"
	refundCanceled  = "canceled"
)

// maxRefundDescription is the longest refund description YooKassa takes.
const maxRefundDescription = 250

// createRefund is POST /refunds
// (https://yookassa.ru/developers/payments/refunds). Receipt is the refund
// receipt under 54-FZ: its items are what is given back, and add up to
// amount (https://yookassa.ru/en/developers/payment-acceptance/scenario-extensions/54fz/refunds).
// The receipts API's type "refund" is implied by the endpoint: a refund's
// receipt carries no type of its own.
type createRefund struct {
	PaymentID   string            `json:"payment_id"`
	Amount      amount            `json:"amount"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata"`
	Receipt     *receipt          `json:"receipt,omitempty"`
}

// refund is YooKassa's refund object.
type refund struct {
	ID                  string               `json:"id"`
	PaymentID           string               `json:"payment_id"`
	Status              string               `json:"status"`
	Amount              amount               `json:"amount"`
	CreatedAt           time.Time            `json:"created_at"`
	Description         string               `json:"description,omitempty"`
	Metadata            map[string]string    `json:"metadata,omitempty"`
	CancellationDetails *cancellationDetails `json:"cancellation_details,omitempty"`
}

type refundList struct {
	Items      []refund `json:"items"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

// Refund returns req.Amount of the payment req.AuthorizationID names:
// POST /refunds with payment_id, amount, a description, rebill's keys in
// metadata and, when req carries one, the refund receipt, under the
// refund's key (as an Idempotence-Key, see [IdempotenceKey]). Its
// Reference is the refund's id. A refusal (4xx) is checked against the
// payment's refunds before it is believed: YooKassa refuses a key sent
// again with other parameters, and the key's first request may have
// refunded; a refusal is never left an unknown outcome.
func (g *Gateway) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return g.refund(ctx, req)
}

func (g *Gateway) refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	if req.AuthorizationID == "" {
		return g.refundFailed(req, "no_authorization"), nil
	}
	value, err := formatAmount(req.Amount, req.Currency)
	if err != nil || req.Amount <= 0 {
		return g.refundFailed(req, "invalid_amount"), nil
	}
	rcpt, err := toReceipt(req.Receipt, req.Currency)
	if err != nil {
		return g.refundFailed(req, "invalid_receipt"), nil
	}
	description := "rebill refund " + req.ChargeKey
	if len(description) > maxRefundDescription {
		description = description[:maxRefundDescription]
	}
	body := createRefund{PaymentID: req.AuthorizationID, Amount: amount{Value: value, Currency: req.Currency},
		Description: description, Receipt: rcpt,
		Metadata: map[string]string{metaChargeKey: req.ChargeKey, metaGatewayKey: req.IdempotencyKey}}
	var r refund
	err = g.call(ctx, http.MethodPost, "/refunds", req.IdempotencyKey, body, &r)
	if refused := (*apiError)(nil); errors.As(err, &refused) {
		return g.refundRefused(ctx, req, refused)
	}
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpRefund, req.IdempotencyKey, err)
	}
	return g.refundSettled(ctx, req.IdempotencyKey, r)
}

// refundRefused answers a refused refund from the payment's refunds: one
// under the key with this request's amount is the answer (the key's first
// request made it); one with another amount is a conflict for a person;
// none means the refusal stands (an amount over what is left, a bad
// receipt, a payment not succeeded).
func (g *Gateway) refundRefused(ctx context.Context, req gateway.Request, refused *apiError) (gateway.Result, error) {
	found, err := g.refundsByKey(ctx, req.AuthorizationID, req.IdempotencyKey)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpRefund, req.IdempotencyKey,
			fmt.Errorf("%w, and the payment's refunds could not be read: %w", refused, err))
	}
	switch len(found) {
	case 0:
		return g.refundFailed(req, refused.Code), nil
	case 1:
		r := found[0]
		if minor, err := parseAmount(r.Amount.Value, r.Amount.Currency); err != nil || minor != req.Amount || r.Amount.Currency != req.Currency {
			return gateway.Result{}, g.wrap(gateway.OpRefund, req.IdempotencyKey,
				fmt.Errorf("%w: the key's refund %s is of %s %s: a person must reconcile it", refused, r.ID, r.Amount.Value, r.Amount.Currency))
		}
		return g.refundSettled(ctx, req.IdempotencyKey, r)
	}
	return gateway.Result{}, g.wrap(gateway.OpRefund, req.IdempotencyKey,
		fmt.Errorf("%w: %w, and %d refunds carry the key", gateway.ErrUnprovable, refused, len(found)))
}

// lookupRefund finds a refund among its payment's refunds (GET
// /refunds?payment_id=…) by the key in its metadata. When none carries it
// the first send may still be processing (YooKassa answers 202 and makes
// the refund later), so a miss proves nothing while the send could still
// arrive: with MayReplay the refund is sent again under its key (YooKassa
// answers the refund it made, or makes it now, which is what the caller
// would do next); without, ErrUnprovable. Once a day has passed since
// SentAt (plus a margin) nothing can still arrive, and a miss is
// ErrNotFound. A look by key alone (no payment id) cannot tell which
// payment's refunds to read: ErrUnprovable.
func (g *Gateway) lookupRefund(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	r := req.Request
	if r.AuthorizationID == "" {
		return gateway.Result{}, fmt.Errorf("%w: gateway %s: refund %q: no payment id to read the refunds of", gateway.ErrUnprovable, g.name, r.IdempotencyKey)
	}
	found, err := g.refundsByKey(ctx, r.AuthorizationID, r.IdempotencyKey)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpRefund, r.IdempotencyKey, err)
	}
	switch {
	case len(found) == 1:
		return g.refundSettled(ctx, r.IdempotencyKey, found[0])
	case len(found) > 1:
		// Only a resend after YooKassa forgot the key makes two: money
		// went back twice, which a person must see.
		return gateway.Result{}, fmt.Errorf("%w: gateway %s: refund %q: %d refunds of payment %s carry the key",
			gateway.ErrUnprovable, g.name, r.IdempotencyKey, len(found), r.AuthorizationID)
	case req.MayReplay:
		return g.refund(ctx, r)
	case !req.SentAt.IsZero() && g.clock.Now().After(req.SentAt.Add(keyRetention+clockSkew)):
		return gateway.Result{}, fmt.Errorf("gateway %s: refund %q: payment %s has no refund under the key: %w",
			g.name, r.IdempotencyKey, r.AuthorizationID, gateway.ErrNotFound)
	}
	return gateway.Result{}, fmt.Errorf("%w: gateway %s: refund %q: payment %s has no refund under the key yet, the first send may still be processing, and this look may not send it again",
		gateway.ErrUnprovable, g.name, r.IdempotencyKey, r.AuthorizationID)
}

// refundsByKey pages through the refunds of payment and keeps those whose
// metadata carries key.
func (g *Gateway) refundsByKey(ctx context.Context, payment, key string) ([]refund, error) {
	q := url.Values{}
	q.Set("payment_id", payment)
	return g.listRefunds(ctx, q, func(r refund) bool { return r.Metadata[metaGatewayKey] == key })
}

// listRefunds pages through GET /refunds?<q>, keeping the refunds that
// match wants (all when nil). The list endpoints share one shape
// (https://yookassa.ru/developers/using-api/lists): limit, cursor,
// next_cursor, created_at.gte/lt filters.
func (g *Gateway) listRefunds(ctx context.Context, q url.Values, wants func(refund) bool) ([]refund, error) {
	q.Set("limit", fmt.Sprint(listPageSize))
	var out []refund
	for {
		var page refundList
		if err := g.call(ctx, http.MethodGet, "/refunds?"+q.Encode(), "", nil, &page); err != nil {
			return nil, fmt.Errorf("list refunds: %w", err)
		}
		for _, r := range page.Items {
			if wants == nil || wants(r) {
				out = append(out, r)
			}
		}
		if page.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// refundOperations lists the refunds created in [from, to), whoever made
// them (one made in the dashboard has no key); pending ones are left to a
// later listing.
func (g *Gateway) refundOperations(ctx context.Context, from, to time.Time) ([]gateway.Result, error) {
	q := url.Values{}
	q.Set("created_at.gte", from.UTC().Format(time.RFC3339Nano))
	q.Set("created_at.lt", to.UTC().Format(time.RFC3339Nano))
	all, err := g.listRefunds(ctx, q, nil)
	if err != nil {
		return nil, err
	}
	var out []gateway.Result
	for _, r := range all {
		if res, err := g.refundResult(r.Metadata[metaGatewayKey], r); err == nil {
			out = append(out, res)
		}
	}
	return out, nil
}

// refundSettled reads a pending refund again until it settles or ctx
// ends (the outcome is then unknown), and returns its result.
func (g *Gateway) refundSettled(ctx context.Context, key string, r refund) (gateway.Result, error) {
	wait := 100 * time.Millisecond
	for r.Status == refundPending {
		if err := sleep(ctx, wait); err != nil {
			return gateway.Result{}, g.wrap(gateway.OpRefund, key, fmt.Errorf("%w: refund %s still pending: %w", gateway.ErrUnknownOutcome, r.ID, err))
		}
		wait = min(2*wait, 2*time.Second)
		var next refund
		if err := g.call(ctx, http.MethodGet, "/refunds/"+url.PathEscape(r.ID), "", nil, &next); err != nil {
			// The refund exists: whatever kept it from being read, the
			// outcome is unknown, not "nothing done" (%v, not %w).
			return gateway.Result{}, g.wrap(gateway.OpRefund, key, fmt.Errorf("%w: refund %s is pending and could not be read again: %v", gateway.ErrUnknownOutcome, r.ID, err))
		}
		r = next
	}
	res, err := g.refundResult(key, r)
	if err != nil {
		return gateway.Result{}, g.wrap(gateway.OpRefund, key, err)
	}
	return res, nil
}

// refundResult is what a settled refund says: succeeded, or canceled
// (nothing returned; its cancellation reason is the code).
func (g *Gateway) refundResult(key string, r refund) (gateway.Result, error) {
	minor, err := parseAmount(r.Amount.Value, r.Amount.Currency)
	if err != nil {
		return gateway.Result{}, fmt.Errorf("%w: refund %s: %w", gateway.ErrUnknownOutcome, r.ID, err)
	}
	res := gateway.Result{Op: gateway.OpRefund, IdempotencyKey: key, Reference: r.ID, Amount: minor,
		Currency: r.Amount.Currency, At: r.CreatedAt.UTC()}
	switch r.Status {
	case refundSucceeded:
		res.Status = gateway.StatusSucceeded
	case refundCanceled:
		res.Status, res.Hard, res.DeclineCode = gateway.StatusFailed, true, "canceled"
		if r.CancellationDetails != nil && r.CancellationDetails.Reason != "" {
			res.DeclineCode = r.CancellationDetails.Reason
		}
	default:
		return gateway.Result{}, fmt.Errorf("%w: refund %s is %s", gateway.ErrUnknownOutcome, r.ID, r.Status)
	}
	return res, nil
}

// refundFailed is the result of a refund YooKassa refused, or that could
// not be written: no refund was made.
func (g *Gateway) refundFailed(req gateway.Request, code string) gateway.Result {
	res := g.failed(gateway.OpRefund, req, code)
	res.Reference, res.Hard = "", true
	return res
}
