package charges_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

// The subscription's fiscal receipt, kept on the charge at its creation,
// goes with the hold and with the capture.
func TestReceiptGoesWithTheHoldAndTheCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	receipt := `{"customer":{"email":"user@example.com"},"items":[{"description":"Gym","quantity":"1","amount":1999,
		"vat_code":1,"payment_mode":"full_payment"}],"tax_system_code":2}`
	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: periodKey, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard, Receipt: []byte(receipt)}}, b.clock.Now())
		return err
	}))
	require.Len(t, created, 1)
	want := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "user@example.com"}, TaxSystemCode: 2,
		Items: []gateway.ReceiptItem{{Description: "Gym", Quantity: "1", Amount: 1999, VATCode: 1, PaymentMode: "full_payment"}}}

	var sent []*gateway.Receipt
	b.gateway.AuthorizeFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		sent = append(sent, req.Receipt)
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: holdRef}, nil
	}
	b.gateway.CaptureFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		sent = append(sent, req.Receipt)
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil
	}
	_, err := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline}).
		Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: created[0].ID, Attempt: 1}, nil)
	require.NoError(t, err)
	_, err = newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline}).
		Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: created[0].ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, []*gateway.Receipt{want, want}, sent)
}
