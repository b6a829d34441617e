package yookassa

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

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
	if req.Op == gateway.OpRefund {
		return g.lookupRefund(ctx, req)
	}
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
// the payment. Then every refund created that day, with its key (refunds
// carry their own metadata) and the refund id as Reference.
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
	refunds, err := g.refundOperations(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: refunds created on %s: %w", g.name, from.Format(time.DateOnly), err)
	}
	out = append(out, refunds...)
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
