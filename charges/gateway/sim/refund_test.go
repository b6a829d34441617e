package sim_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
)

func refundReq(key string, auth gateway.Result, amount int64) gateway.Request {
	return gateway.Request{IdempotencyKey: key, Amount: amount, Currency: auth.Currency, AuthorizationID: auth.Reference}
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()

	auth, err := c.Authorize(ctx, authorizeReq("a1", tokOK, 3000))
	require.NoError(t, err)
	// Nothing captured: nothing to return.
	res, err := c.Refund(ctx, refundReq("r0", auth, 100))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Equal(t, "not_captured", res.DeclineCode)

	_, err = c.Capture(ctx, settleReq("c1", auth))
	require.NoError(t, err)
	first, err := c.Refund(ctx, refundReq("r1", auth, 1000))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, first.Status)
	require.Equal(t, gateway.OpRefund, first.Op)
	require.Equal(t, int64(1000), first.Amount)
	again, err := c.Refund(ctx, refundReq("r1", auth, 1000))
	require.NoError(t, err)
	require.Equal(t, first.Reference, again.Reference, "a replayed key returns the first refund")

	over, err := c.Refund(ctx, refundReq("r2", auth, 2001))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, over.Status)
	require.Equal(t, "amount_exceeds_captured", over.DeclineCode)
	rest, err := c.Refund(ctx, refundReq("r3", auth, 2000))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, rest.Status)
	wrong := refundReq("r4", auth, 1)
	wrong.Currency = "USD"
	res, err = c.Refund(ctx, wrong)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)

	found, err := c.Lookup(ctx, gateway.ByKey(gateway.OpRefund, "r3"))
	require.NoError(t, err)
	require.Equal(t, rest.Reference, found.Reference)
	ops, err := c.Operations(ctx, time.Now())
	require.NoError(t, err)
	var refunded int64
	for _, o := range ops {
		if o.Op == gateway.OpRefund && o.Status == gateway.StatusSucceeded {
			refunded += o.Amount
		}
	}
	require.Equal(t, int64(3000), refunded, "the day's operations list the refunds")
}

// Refunds of one payment racing under different keys never return more
// than was captured: each locks the authorization.
func TestConcurrentRefundsWithinTheCapture(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()
	auth, err := c.Authorize(ctx, authorizeReq("a1", tokOK, 1000))
	require.NoError(t, err)
	_, err = c.Capture(ctx, settleReq("c1", auth))
	require.NoError(t, err)
	var wg sync.WaitGroup
	results := make([]gateway.Result, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = c.Refund(ctx, refundReq("r"+string(rune('a'+i)), auth, 300))
		}()
	}
	wg.Wait()
	succeeded := 0
	for _, r := range results {
		if r.Status == gateway.StatusSucceeded {
			succeeded++
		}
	}
	require.Equal(t, 3, succeeded, "3 × 300 fit in 1000")
}

func TestRefundFaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	impatient := b.client("sim1", sim.ClientOptions{Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	auth, err := impatient.Authorize(ctx, authorizeReq("a1", tokOK, 1000))
	require.NoError(t, err)
	_, err = impatient.Capture(ctx, settleReq("c1", auth))
	require.NoError(t, err)

	b.setFaults(t, "sim1", sim.FaultsPatch{RefundsDown: ptr(true)})
	_, err = impatient.Refund(ctx, refundReq("r1", auth, 100))
	requireErr(t, err, gateway.ErrUnavailable)
	_, err = impatient.Lookup(ctx, gateway.ByKey(gateway.OpRefund, "r1"))
	requireErr(t, err, gateway.ErrNotFound)

	b.setFaults(t, "sim1", sim.FaultsPatch{RefundsDown: ptr(false), RefundsLost: ptr(true)})
	_, err = impatient.Refund(ctx, refundReq("r1", auth, 100))
	requireErr(t, err, gateway.ErrUnknownOutcome)
	found, err := impatient.Lookup(ctx, gateway.ByKey(gateway.OpRefund, "r1"))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, found.Status, "performed although never answered")
	_, err = impatient.Refund(ctx, refundReq("r1", auth, 100))
	requireErr(t, err, gateway.ErrUnknownOutcome)
	n := 0
	for _, e := range b.ledger(t, "sim1") {
		if e.Op == gateway.OpRefund {
			n++
		}
	}
	require.Equal(t, 1, n, "a replay of a lost refund records nothing")
}

// TestReceiptsAreRecorded: the simulator keeps the fiscal receipt each
// operation was sent with, as the first call under its key sent it, so
// tests can see what a fiscalizing provider would have filed.
func TestReceiptsAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()
	receipt := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "anna@example.com"}, Items: []gateway.ReceiptItem{{
		Description: "Штраф ГИБДД, УИН 18810177230000000017", Quantity: "1", Amount: 3000, VATCode: 1,
		PaymentSubject: "payment", PaymentMode: "full_payment", AgentType: gateway.AgentPayment,
		Supplier: &gateway.ReceiptSupplier{Name: "УФК по г. Москве", Phone: "74956941000", INN: "7707089101"}}}}
	req := authorizeReq("a1", tokOK, 3000)
	req.Receipt = receipt
	auth, err := c.Authorize(ctx, req)
	require.NoError(t, err)
	replay := req
	replay.Receipt = nil
	_, err = c.Authorize(ctx, replay)
	require.NoError(t, err)
	capture := settleReq("c1", auth)
	capture.Receipt = receipt
	_, err = c.Capture(ctx, capture)
	require.NoError(t, err)
	_, err = c.Void(ctx, settleReq("v1", auth))
	require.NoError(t, err)

	want, err := json.Marshal(receipt)
	require.NoError(t, err)
	entries := b.ledger(t, "sim1")
	require.Len(t, entries, 3)
	require.JSONEq(t, string(want), string(entries[0].Receipt), "the hold's receipt, as first sent")
	require.JSONEq(t, string(want), string(entries[1].Receipt), "the capture's receipt")
	require.Nil(t, entries[2].Receipt, "a call without a receipt records none")
}
