package charges_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
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

// A bill's receipt, one item with the payment agent's attributes, goes
// with the hold and the capture priced at what the attempt takes: a fine
// whose discount ended before its first hold is held at the full price,
// and so is its receipt's item. A capture sent again (the gateway did
// nothing the first time) carries the same receipt under the same key,
// which a gateway performs, and fiscalizes, once.
func TestBillReceiptIsPricedAtTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	deadline := start.Add(time.Hour)
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'fake', $2, 12, 2030, $3, $3)`,
		enrollmentID, currentCard, start)
	require.NoError(t, err)
	item := gateway.ReceiptItem{Description: "Штраф ГИБДД, УИН 18800000000000000008", Quantity: "1", Amount: 500, VATCode: 1,
		PaymentSubject: "payment", PaymentMode: "full_payment", AgentType: gateway.AgentPayment,
		Supplier: &gateway.ReceiptSupplier{Name: "УФК по г. Москве", Phone: "74956941000", INN: "7707089101"}}
	receipt, err := json.Marshal(gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "user@example.com"},
		Items: []gateway.ReceiptItem{item}})
	require.NoError(t, err)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, _, err = b.pipeline.Store.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: "18800000000000000008", Due: start, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "fake", Token: currentCard, Receipt: receipt}, start)
		return err
	}))
	b.clock.Advance(2 * time.Hour) // the discount ended before the first hold

	var sent []gateway.Request
	b.gateway.AuthorizeFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		sent = append(sent, req)
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: holdRef}, nil
	}
	b.gateway.CaptureFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		sent = append(sent, req)
		if len(sent) == 2 {
			return gateway.Result{}, gateway.ErrUnavailable // did nothing: the capture is sent again
		}
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil
	}
	_, err = newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline}).
		Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, _ = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)
	full := item
	full.Amount = 1000
	want := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "user@example.com"}, Items: []gateway.ReceiptItem{full}}
	require.Len(t, sent, 3, "the hold, its capture and the capture sent again")
	for _, req := range sent {
		require.EqualValues(t, 1000, req.Amount)
		require.Equal(t, want, req.Receipt)
	}
	require.Equal(t, sent[1].IdempotencyKey, sent[2].IdempotencyKey, "the same capture, receipt and all, under its key")
}
