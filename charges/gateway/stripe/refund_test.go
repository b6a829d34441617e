package stripe_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/testkit/stripetest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// captured places a hold on token and captures it in full (1999 EUR);
// it returns the PaymentIntent id.
func (b *testBundle) captured(t *testing.T, token string) string {
	t.Helper()
	ctx := context.Background()
	held, err := b.gateway.Authorize(ctx, request("a1:authorize", token))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, held.Status)
	capture := request("a1:capture", token)
	capture.AuthorizationID = held.Reference
	res, err := b.gateway.Capture(ctx, capture)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	return held.Reference
}

// refundRequest is the charge's refund number n of amount, of payment pi.
func refundRequest(n string, pi string, amount int64) gateway.Request {
	return gateway.Request{IdempotencyKey: "sub_1:2026-12-01:r" + n + ":refund", Amount: amount, Currency: "EUR",
		ChargeKey: "sub_1:2026-12-01", AuthorizationID: pi}
}

// TestRefundInFullAndInPart: refunds of one payment add up to at most its
// capture; the one that would pass it is refused, with nothing moved.
func TestRefundInFullAndInPart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pi := b.captured(t, okCard)

	partial, err := b.gateway.Refund(ctx, refundRequest("1", pi, 500))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, partial.Status)
	require.Equal(t, gateway.OpRefund, partial.Op)
	require.Equal(t, refundRequest("1", pi, 0).IdempotencyKey, partial.IdempotencyKey)
	require.Equal(t, int64(500), partial.Amount)
	require.Equal(t, "EUR", partial.Currency)
	require.Regexp(t, `^re_`, partial.Reference)

	rest, err := b.gateway.Refund(ctx, refundRequest("2", pi, 1499))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, rest.Status)
	require.NotEqual(t, partial.Reference, rest.Reference)

	over, err := b.gateway.Refund(ctx, refundRequest("3", pi, 1))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, over.Status)
	require.Equal(t, "amount_too_large", over.DeclineCode)
	require.Empty(t, over.Reference)

	refunds := b.fake.Refunds()
	require.Len(t, refunds, 2)
	require.Equal(t, pi, refunds[0].PaymentIntent)
	require.Equal(t, "requested_by_customer", refunds[0].Reason)
	require.Equal(t, refundRequest("1", pi, 0).IdempotencyKey, refunds[0].Metadata["rebill_refund_key"])
	require.Equal(t, "sub_1:2026-12-01", refunds[0].Metadata["rebill_charge_key"])

	// A refund names its payment; without one nothing is sent.
	res, err := b.gateway.Refund(ctx, refundRequest("4", "", 100))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Equal(t, 3, b.fake.Calls(stripetest.OpRefund))
}

// TestRefundReplaySameKeyOneRefund: a refund sent again under its key, in
// turn or at once, gets the first answer and moves no more money.
func TestRefundReplaySameKeyOneRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pi := b.captured(t, okCard)
	first, err := b.gateway.Refund(context.Background(), refundRequest("1", pi, 700))
	require.NoError(t, err)
	var wg sync.WaitGroup
	refs := make([]string, 8)
	for i := range refs {
		wg.Go(func() {
			res, err := b.gateway.Refund(context.Background(), refundRequest("1", pi, 700))
			if err == nil {
				refs[i] = res.Reference
			}
		})
	}
	wg.Wait()
	for _, ref := range refs {
		require.Equal(t, first.Reference, ref)
	}
	require.Len(t, b.fake.Refunds(), 1)
}

// TestLostRefundFoundByLookup: Stripe made the refund and the answer was
// lost; the look-up finds it among the payment's refunds by rebill's key,
// sending nothing, even where it may replay.
func TestLostRefundFoundByLookup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pi := b.captured(t, okCard)
	req := refundRequest("1", pi, 900)
	lookup := gateway.LookupRequest{Op: gateway.OpRefund, Request: req, SentAt: b.clock.Now()}

	_, err := b.gateway.Lookup(ctx, lookup)
	require.ErrorIs(t, err, gateway.ErrNotFound, "not refunded yet")

	b.fake.Fail(stripetest.OpRefund, stripetest.LoseAnswer())
	_, err = b.gateway.Refund(ctx, req)
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
	require.Len(t, b.fake.Refunds(), 1)

	b.clock.Advance(30 * time.Hour) // past the key's life: the list still tells
	for _, mayReplay := range []bool{false, true} {
		lookup.MayReplay = mayReplay
		res, err := b.gateway.Lookup(ctx, lookup)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, b.fake.Refunds()[0].ID, res.Reference)
		require.Equal(t, int64(900), res.Amount)
		require.Equal(t, req.IdempotencyKey, res.IdempotencyKey)
	}
	require.Equal(t, 1, b.fake.Calls(stripetest.OpRefund), "the look-up sent no refund")
	require.Len(t, b.fake.Refunds(), 1)

	// Another refund of the payment is not this one.
	other := refundRequest("2", pi, 100)
	_, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpRefund, Request: other})
	require.ErrorIs(t, err, gateway.ErrNotFound)

	// By key alone the payment is not known: Stripe cannot tell.
	_, err = b.gateway.Lookup(ctx, gateway.ByKey(gateway.OpRefund, req.IdempotencyKey))
	require.ErrorIs(t, err, gateway.ErrUnprovable)

	// A payment Stripe does not know proves nothing.
	_, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpRefund, Request: refundRequest("1", "pi_unknown", 900)})
	require.Error(t, err)
	require.NotErrorIs(t, err, gateway.ErrNotFound)
}

// TestRefundTheProviderFails: a failed refund returned nothing; a pending
// one is unknown until it settles.
func TestRefundTheProviderFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pi := b.captured(t, customer+"/pm_refund_fail")
		res, err := b.gateway.Refund(ctx, refundRequest("1", pi, 1999))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "expired_or_canceled_card", res.DeclineCode)
		require.NotEmpty(t, res.Reference)
	})

	t.Run("pending, then settled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pi := b.captured(t, customer+"/pm_refund_pending")
		req := refundRequest("1", pi, 1999)
		_, err := b.gateway.Refund(ctx, req)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		lookup := gateway.LookupRequest{Op: gateway.OpRefund, Request: req}
		_, err = b.gateway.Lookup(ctx, lookup)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		b.fake.SetRefundStatus(b.fake.Refunds()[0].ID, "succeeded", "")
		res, err := b.gateway.Lookup(ctx, lookup)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)

		// A card refund can fail after it succeeded: the next look reads it.
		b.fake.SetRefundStatus(b.fake.Refunds()[0].ID, "failed", "lost_or_stolen_card")
		res, err = b.gateway.Lookup(ctx, lookup)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "lost_or_stolen_card", res.DeclineCode)
	})

	t.Run("a payment not captured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := b.hold(t, "a1:authorize")
		res, err := b.gateway.Refund(ctx, refundRequest("1", held.Reference, 100))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "payment_intent_unexpected_state", res.DeclineCode)
	})

	for name, tc := range map[string]struct {
		status int
		want   error
	}{
		"503 did nothing":   {http.StatusServiceUnavailable, gateway.ErrUnavailable},
		"429 did nothing":   {http.StatusTooManyRequests, gateway.ErrUnavailable},
		"500 may have":      {http.StatusInternalServerError, gateway.ErrUnknownOutcome},
		"409 key in flight": {http.StatusConflict, gateway.ErrUnknownOutcome},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pi := b.captured(t, okCard)
			code := ""
			if tc.status == http.StatusConflict {
				code = "idempotency_key_in_use"
			}
			b.fake.Fail(stripetest.OpRefund, stripetest.Answer(tc.status, code))
			_, err := b.gateway.Refund(ctx, refundRequest("1", pi, 100))
			require.ErrorIs(t, err, tc.want)
			requireNoSecret(t, err, okCard)
		})
	}
}

// TestRefundKeyReusedWithOtherParameters: Stripe refuses the key with
// other parameters (400 idempotency_error). The payment's refunds tell
// what the key did; the answer is never an unknown outcome.
func TestRefundKeyReusedWithOtherParameters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("the key refunded the same amount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pi := b.captured(t, okCard)
		first, err := b.gateway.Refund(ctx, refundRequest("1", pi, 500))
		require.NoError(t, err)
		again := refundRequest("1", pi, 500)
		again.ChargeKey = "sub_1:2026-12-01 " // a metadata difference only
		res, err := b.gateway.Refund(ctx, again)
		require.NoError(t, err)
		require.Equal(t, first.Reference, res.Reference)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
	})

	t.Run("the key refunded another amount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pi := b.captured(t, okCard)
		_, err := b.gateway.Refund(ctx, refundRequest("1", pi, 500))
		require.NoError(t, err)
		_, err = b.gateway.Refund(ctx, refundRequest("1", pi, 600))
		require.ErrorContains(t, err, "idempotency_error")
		require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
		require.NotErrorIs(t, err, gateway.ErrUnavailable)
		require.Len(t, b.fake.Refunds(), 1)
	})

	t.Run("the key moved no money", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pi := b.captured(t, okCard)
		over, err := b.gateway.Refund(ctx, refundRequest("1", pi, 5000))
		require.NoError(t, err)
		require.Equal(t, "amount_too_large", over.DeclineCode)
		res, err := b.gateway.Refund(ctx, refundRequest("1", pi, 500))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "idempotency_key_reused", res.DeclineCode)
		require.Empty(t, b.fake.Refunds())
	})
}

// TestOperationsListsRefunds: a refund is listed on the day it was made,
// not on its payment's day, with rebill's key.
func TestOperationsListsRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pi := b.captured(t, okCard)
	b.clock.Advance(48 * time.Hour)
	refunded, err := b.gateway.Refund(ctx, refundRequest("1", pi, 300))
	require.NoError(t, err)

	ops, err := b.gateway.Operations(ctx, b.clock.Now())
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, gateway.OpRefund, ops[0].Op)
	require.Equal(t, refunded.Reference, ops[0].Reference)
	require.Equal(t, refundRequest("1", pi, 0).IdempotencyKey, ops[0].IdempotencyKey)
	require.Equal(t, int64(300), ops[0].Amount)
	require.Equal(t, gateway.StatusSucceeded, ops[0].Status)

	ops, err = b.gateway.Operations(ctx, start)
	require.NoError(t, err)
	for _, op := range ops {
		require.NotEqual(t, gateway.OpRefund, op.Op, "the payment's day lists no refund")
	}
	require.Len(t, ops, 2, "its hold and capture")
}

// TestReceiptIsNotSent: Stripe files no 54-FZ receipt. A bill's hold,
// capture and refund that carry one succeed as without it, and nothing
// of the receipt reaches Stripe.
func TestReceiptIsNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewClock(start)
	fake := stripetest.NewServer(t)
	fake.Now = clk.Now
	target, err := url.Parse(fake.URL)
	require.NoError(t, err)
	var mu sync.Mutex
	var forms []string
	proxy := httputil.NewSingleHostReverseProxy(target)
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		mu.Lock()
		forms = append(forms, r.URL.Path+"?"+string(body))
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(recorder.Close)
	g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: recorder.URL, APIKey: apiKey, Timeout: 2 * time.Second,
		HTTPClient: oneShotClient(), Clock: clk})
	require.NoError(t, err)
	receipt := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "anna@example.com"}, Items: []gateway.ReceiptItem{{
		Description: "ЖКУ, ЕЛС 75ДА533315, счёт H-1", Quantity: "1", Amount: 1999, VATCode: 1, PaymentSubject: "service",
		PaymentMode: "full_payment", AgentType: gateway.AgentPayment,
		Supplier: &gateway.ReceiptSupplier{Name: "ООО УК Дом", Phone: "74951234567", INN: "7701234567"}}}}

	auth := request("a1:authorize", okCard)
	auth.Receipt = receipt
	held, err := g.Authorize(ctx, auth)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, held.Status)
	capture := request("a1:capture", "")
	capture.AuthorizationID, capture.Receipt = held.Reference, receipt
	res, err := g.Capture(ctx, capture)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	refund := refundRequest("1", held.Reference, 1999)
	refund.Receipt = receipt
	res, err = g.Refund(ctx, refund)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, forms, 3)
	for _, f := range forms {
		for _, word := range []string{"receipt", "agent", "supplier", "7701234567", "anna"} {
			require.NotContains(t, strings.ToLower(f), word, f)
		}
	}
}
