package yookassa_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/yookassa"
)

// captured places a hold of 499.00 RUB on token, with receipt when not
// nil, captures it in full and returns the payment id.
func (b *testBundle) captured(t *testing.T, token string, receipt *gateway.Receipt) string {
	t.Helper()
	ctx := context.Background()
	auth := request(gateway.OpAuthorize, token)
	auth.Receipt = receipt
	held, err := b.gw.Authorize(ctx, auth)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, held.Status)
	capture := withPayment(request(gateway.OpCapture, ""), held.Reference)
	capture.Receipt = receipt
	res, err := b.gw.Capture(ctx, capture)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	return held.Reference
}

// refundRequest is the charge's refund number n of amount, of payment.
func refundRequest(n, payment string, amount int64) gateway.Request {
	return gateway.Request{IdempotencyKey: chargeKey + ":r" + n + ":refund", Amount: amount, Currency: "RUB",
		ChargeKey: chargeKey, AuthorizationID: payment}
}

// refundPosts are the POST /refunds the fake received.
func (b *testBundle) refundPosts() []fakeRequest {
	var out []fakeRequest
	for _, r := range b.fake.received() {
		if r.Method == http.MethodPost && r.Path == "/v3/refunds" {
			out = append(out, r)
		}
	}
	return out
}

// TestRefundInFullAndInPart: refunds of one payment add up to at most its
// capture; the one that would pass it is refused, with nothing moved.
func TestRefundInFullAndInPart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	payment := b.captured(t, "pm_ok_1", nil)

	partial, err := b.gw.Refund(ctx, refundRequest("1", payment, 10000))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, partial.Status)
	require.Equal(t, gateway.OpRefund, partial.Op)
	require.Equal(t, refundRequest("1", "", 0).IdempotencyKey, partial.IdempotencyKey)
	require.Equal(t, int64(10000), partial.Amount)
	require.Equal(t, "RUB", partial.Currency)

	rest, err := b.gw.Refund(ctx, refundRequest("2", payment, 39900))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, rest.Status)

	over, err := b.gw.Refund(ctx, refundRequest("3", payment, 1))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, over.Status)
	require.Equal(t, "invalid_request", over.DeclineCode)
	require.Empty(t, over.Reference)

	refunds := b.fake.allRefunds()
	require.Len(t, refunds, 2)
	require.Equal(t, partial.Reference, refunds[0].ID)
	require.Equal(t, rest.Reference, refunds[1].ID)
	require.Equal(t, payment, refunds[0].PaymentID)
	require.Equal(t, fakeAmount{Value: "100.00", Currency: "RUB"}, refunds[0].Amount)
	require.Equal(t, refundRequest("1", "", 0).IdempotencyKey, refunds[0].Metadata["rebill_gateway_key"])
	require.Equal(t, chargeKey, refunds[0].Metadata["rebill_charge_key"])
	require.Equal(t, "rebill refund "+chargeKey, refunds[0].Description)
	posts := b.refundPosts()
	require.Len(t, posts, 3)
	require.Equal(t, yookassa.IdempotenceKey(refundRequest("1", "", 0).IdempotencyKey), posts[0].Key)

	// A refund names its payment; without one nothing is sent.
	res, err := b.gw.Refund(ctx, refundRequest("4", "", 100))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Len(t, b.refundPosts(), 3)
}

// TestRefundReceipt: a payment that had a receipt is refunded in part
// with the refund receipt, whose items add up to what is returned.
func TestRefundReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	customer := gateway.ReceiptCustomer{Email: "anna@example.com"}
	paid := &gateway.Receipt{Customer: customer, Items: []gateway.ReceiptItem{
		{Description: "Gym, monthly", Quantity: "1", Amount: 45000, VATCode: 1},
		{Description: "Towel", Quantity: "2", Amount: 2450, VATCode: 4},
	}}
	b := setup(t)
	payment := b.captured(t, "pm_ok_1", paid)

	bare, err := b.gw.Refund(ctx, refundRequest("1", payment, 4900))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, bare.Status, "a partial refund of a fiscalized payment needs its receipt")
	require.Empty(t, b.fake.allRefunds())

	req := refundRequest("2", payment, 4900)
	req.Receipt = &gateway.Receipt{Customer: customer, Items: []gateway.ReceiptItem{
		{Description: "Towel", Quantity: "2", Amount: 2450, VATCode: 4},
	}}
	res, err := b.gw.Refund(ctx, req)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	refunds := b.fake.allRefunds()
	require.Len(t, refunds, 1)
	require.JSONEq(t, `{"customer":{"email":"anna@example.com"},"items":[
		{"description":"Towel","quantity":2,"amount":{"value":"24.50","currency":"RUB"},"vat_code":4}]}`, string(refunds[0].receipt))
	var sent map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b.refundPosts()[1].Body, &sent))
	require.NotContains(t, string(sent["receipt"]), `"type"`)
}

// TestRefundReceiptOfAnAgentItem: the refund receipt of a bill paid on a
// supplier's behalf keeps the agent's attributes of the item returned.
func TestRefundReceiptOfAnAgentItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	item := gateway.ReceiptItem{Description: "ЖКУ за 11.2026, ЛС 75ДА533315", Quantity: "1", Amount: 49900, VATCode: 1,
		PaymentSubject: "service", PaymentMode: "full_payment", AgentType: gateway.AgentPayment,
		Supplier: &gateway.ReceiptSupplier{Name: "ООО УК Дом", Phone: "74951234567", INN: "7701234567"}}
	paid := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "anna@example.com"}, Items: []gateway.ReceiptItem{item}}
	b := setup(t)
	payment := b.captured(t, "pm_ok_1", paid)
	req := refundRequest("1", payment, 49900)
	req.Receipt = paid
	res, err := b.gw.Refund(ctx, req)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	refunds := b.fake.allRefunds()
	require.Len(t, refunds, 1)
	require.JSONEq(t, `{"customer":{"email":"anna@example.com"},"items":[{"description":"ЖКУ за 11.2026, ЛС 75ДА533315",
		"quantity":1,"amount":{"value":"499.00","currency":"RUB"},"vat_code":1,"payment_subject":"service",
		"payment_mode":"full_payment","agent_type":"payment_agent",
		"supplier":{"name":"ООО УК Дом","phone":"74951234567","inn":"7701234567"}}]}`, string(refunds[0].receipt))
}

// TestRefundReplayIsOneRefund: a refund sent again under its key, in turn
// or at once, gets the first answer and moves no more money.
func TestRefundReplayIsOneRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payment := b.captured(t, "pm_ok_1", nil)
	first, err := b.gw.Refund(context.Background(), refundRequest("1", payment, 20000))
	require.NoError(t, err)
	var wg sync.WaitGroup
	refs := make([]string, 8)
	for i := range refs {
		wg.Go(func() {
			res, err := b.gw.Refund(context.Background(), refundRequest("1", payment, 20000))
			if err == nil {
				refs[i] = res.Reference
			}
		})
	}
	wg.Wait()
	for _, ref := range refs {
		require.Equal(t, first.Reference, ref)
	}
	require.Len(t, b.fake.allRefunds(), 1)
}

// TestLostRefundFoundByLookup: YooKassa made the refund and the answer was
// lost; the look-up finds it among the payment's refunds by rebill's key
// and sends nothing.
func TestLostRefundFoundByLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Lost", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		payment := b.captured(t, "pm_ok_1", nil)
		req := refundRequest("1", payment, 15000)
		b.fake.loseNext("refund", 1)
		_, err := b.gw.Refund(ctx, req)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		require.Len(t, b.fake.allRefunds(), 1)

		res, err := b.gw.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpRefund, Request: req, SentAt: start})
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, b.fake.allRefunds()[0].ID, res.Reference)
		require.Equal(t, int64(15000), res.Amount)
		require.Len(t, b.refundPosts(), 1, "the look-up sent no refund")

		_, err = b.gw.Lookup(ctx, gateway.ByKey(gateway.OpRefund, req.IdempotencyKey))
		require.ErrorIs(t, err, gateway.ErrUnprovable, "without the payment there is no list to read")
	})

	t.Run("NeverArrived", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		payment := b.captured(t, "pm_ok_1", nil)
		req := refundRequest("1", payment, 15000)
		lookup := gateway.LookupRequest{Op: gateway.OpRefund, Request: req, SentAt: b.clock.Now()}
		_, err := b.gw.Lookup(ctx, lookup)
		require.ErrorIs(t, err, gateway.ErrUnprovable, "the first send may still be processing")
		require.Empty(t, b.refundPosts())

		b.clock.Advance(25 * time.Hour)
		_, err = b.gw.Lookup(ctx, lookup)
		require.ErrorIs(t, err, gateway.ErrNotFound, "a day on, nothing can still arrive")
		require.Empty(t, b.refundPosts())

		lookup.MayReplay = true
		res, err := b.gw.Lookup(ctx, lookup)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status, "the replay makes the refund the caller would send")
		require.Len(t, b.fake.allRefunds(), 1)
	})
}

// TestRefundAnswers: a canceled refund returned nothing; a pending one is
// read until it settles; technical failures map like the other calls'.
func TestRefundAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		token  string
		fault  func(f *fakeYooKassa)
		status gateway.Status
		code   string
		err    error
	}{
		{name: "Succeeded", token: "pm_ok_1", status: gateway.StatusSucceeded},
		{name: "Canceled", token: "pm_refund_cancel_1", status: gateway.StatusFailed, code: "general_decline"},
		{name: "PendingThenSucceeded", token: "pm_refund_pending_1", status: gateway.StatusSucceeded},
		{name: "Unavailable503", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("refund", 503) }, err: gateway.ErrUnavailable},
		{name: "Internal500", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("refund", 500) }, err: gateway.ErrUnknownOutcome},
		{name: "PendingThenUnreadable", token: "pm_refund_pending_1", fault: func(f *fakeYooKassa) { f.failNext("refund_get", 503) }, err: gateway.ErrUnknownOutcome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			payment := b.captured(t, tc.token, nil)
			if tc.fault != nil {
				tc.fault(b.fake)
			}
			res, err := b.gw.Refund(ctx, refundRequest("1", payment, 49900))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				b.requireClean(t, err, tc.token)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.status, res.Status)
			require.Equal(t, tc.code, res.DeclineCode)
			require.NotEmpty(t, res.Reference)
		})
	}

	t.Run("NotCaptured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := b.hold(ctx, t)
		res, err := b.gw.Refund(ctx, refundRequest("1", held, 100))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Empty(t, b.fake.allRefunds())
	})
}

// TestRefundKeyReusedWithOtherParameters: YooKassa refuses a key sent
// again with other parameters. The payment's refunds tell what the key
// did; the answer is never an unknown outcome.
func TestRefundKeyReusedWithOtherParameters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SameAmount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		payment := b.captured(t, "pm_ok_1", nil)
		first, err := b.gw.Refund(ctx, refundRequest("1", payment, 500))
		require.NoError(t, err)
		again := refundRequest("1", payment, 500)
		again.ChargeKey += " " // the description and metadata differ
		res, err := b.gw.Refund(ctx, again)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, first.Reference, res.Reference)
		require.Len(t, b.fake.allRefunds(), 1)
	})

	t.Run("OtherAmount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		payment := b.captured(t, "pm_ok_1", nil)
		_, err := b.gw.Refund(ctx, refundRequest("1", payment, 500))
		require.NoError(t, err)
		_, err = b.gw.Refund(ctx, refundRequest("1", payment, 600))
		require.ErrorContains(t, err, "a person must reconcile it")
		require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
		require.NotErrorIs(t, err, gateway.ErrUnavailable)
		require.Len(t, b.fake.allRefunds(), 1)
	})
}

// TestOperationsListsRefunds: a refund is listed on the day it was made,
// with rebill's key and the refund id.
func TestOperationsListsRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	payment := b.captured(t, "pm_ok_1", nil)
	b.clock.Advance(48 * time.Hour)
	refunded, err := b.gw.Refund(ctx, refundRequest("1", payment, 30000))
	require.NoError(t, err)

	ops, err := b.gw.Operations(ctx, b.clock.Now())
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, gateway.OpRefund, ops[0].Op)
	require.Equal(t, refunded.Reference, ops[0].Reference)
	require.Equal(t, refundRequest("1", "", 0).IdempotencyKey, ops[0].IdempotencyKey)
	require.Equal(t, int64(30000), ops[0].Amount)
	require.Equal(t, gateway.StatusSucceeded, ops[0].Status)

	ops, err = b.gw.Operations(ctx, start)
	require.NoError(t, err)
	require.Len(t, ops, 2, "the payment's day: its hold and capture, no refund")
	for _, op := range ops {
		require.NotEqual(t, gateway.OpRefund, op.Op)
	}
}
