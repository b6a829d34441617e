package autopay_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
)

var (
	housingSupplier = gateway.ReceiptSupplier{Name: "ООО УК Дом", Phone: "74951234567", INN: "7701234567"}
	finesSupplier   = gateway.ReceiptSupplier{Name: "УФК по г. Москве (ГУ МВД России по г. Москве)", Phone: "74956941000",
		INN: "7707089101"}
)

// receiptsOn has rebill send the receipts of kinds.
func receiptsOn(kinds ...enrollments.Kind) autopay.BillReceipts {
	r := autopay.BillReceipts{Kinds: map[enrollments.Kind]bool{}, AgentType: gateway.AgentPayment, VATCode: 1,
		PaymentSubject: map[enrollments.Kind]string{enrollments.Housing: "service", enrollments.Fines: "payment"},
		Suppliers:      map[enrollments.Kind]gateway.ReceiptSupplier{enrollments.Housing: housingSupplier, enrollments.Fines: finesSupplier}}
	for _, k := range kinds {
		r.Kinds[k] = true
	}
	return r
}

// enrolWithContact is enrol for an enrollment whose receipts go to
// contact (nil: none given).
func (b *testBundle) enrolWithContact(t *testing.T, n enrolment, contact *subscriptions.ReceiptCustomer) enrollments.Enrollment {
	t.Helper()
	var e enrollments.Enrollment
	b.inTx(t, func(tx pgx.Tx) (err error) {
		e, err = b.autopay.Enrollments.Create(context.Background(), tx, enrollments.New{CustomerID: n.customer, Kind: n.kind,
			AccountRef: n.ref, Currency: "RUB", MaxAmount: n.maxAmount, PayDay: n.payDay, ReceiptCustomer: contact,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_" + n.customer, ExpMonth: 12, ExpYear: 2035}})
		return err
	})
	return e
}

// A housing bill's charge carries its receipt: one item, the bill, for
// the amount charged, with the payment agent's type and the supplier,
// sent to the enrollment's receipt contact. A fine's item is a payment
// to its administrator, at the price of its attempt.
func TestBillChargeCarriesTheAgentsReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.autopay.Receipts = receiptsOn(enrollments.Housing, enrollments.Fines)
	contact := &subscriptions.ReceiptCustomer{Email: "anna@example.com"}

	e := b.enrolWithContact(t, housingOf("cus_1", "75ДА533315", 0, 1000000), contact)
	bill := b.mustPush(t, e, housing(t, "H-1", 123456, "2027-03-25"))
	r, err := b.charge(t, bill).FiscalReceipt()
	require.NoError(t, err)
	require.Equal(t, &gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "anna@example.com"},
		Items: []gateway.ReceiptItem{{Description: "ЖКУ, ЕЛС 75ДА533315, счёт H-1", Quantity: "1", Amount: 123456, VATCode: 1,
			PaymentSubject: "service", PaymentMode: "full_payment", AgentType: gateway.AgentPayment, Supplier: &housingSupplier}}}, r)

	f := b.enrolWithContact(t, finesOf("cus_2", "77УА123456", 500000), &subscriptions.ReceiptCustomer{Phone: "79001234567"})
	id := uin(1)
	fineBill := b.mustPush(t, f, fine(t, id, 100000, 50000, "2027-03-20", "2027-05-09"))
	r, err = b.charge(t, fineBill).FiscalReceipt()
	require.NoError(t, err)
	require.Equal(t, &gateway.Receipt{Customer: gateway.ReceiptCustomer{Phone: "79001234567"},
		Items: []gateway.ReceiptItem{{Description: "Штраф, УИН " + id, Quantity: "1", Amount: 50000, VATCode: 1,
			PaymentSubject: "payment", PaymentMode: "full_payment", AgentType: gateway.AgentPayment, Supplier: &finesSupplier}}}, r)
}

// rebill sends no receipt of its own for a kind whose receipts the
// gateway fiscalizes, nor for an enrollment that names no receipt
// contact; the bill is charged all the same.
func TestNoReceiptWhereRebillSendsNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.autopay.Receipts = receiptsOn(enrollments.Housing)
	contact := &subscriptions.ReceiptCustomer{Email: "anna@example.com"}

	f := b.enrolWithContact(t, finesOf("cus_1", "77УА123456", 500000), contact)
	c := b.charge(t, b.mustPush(t, f, fine(t, uin(1), 100000, 50000, "2027-03-20", "2027-05-09")))
	r, err := c.FiscalReceipt()
	require.NoError(t, err)
	require.Nil(t, r, "fines' receipts are the gateway's")

	h := b.enrolWithContact(t, housingOf("cus_2", "75ДА533315", 0, 1000000), nil)
	c = b.charge(t, b.mustPush(t, h, housing(t, "H-1", 1000, "2027-03-25")))
	r, err = c.FiscalReceipt()
	require.NoError(t, err)
	require.Nil(t, r, "no contact to send it to")
	require.EqualValues(t, 1000, c.Amount)
}

// A housing bill that names its supplier is paid to that supplier: its
// receipt names it (with the configured phone), and the item names the
// payment document and the month billed; a bill naming none keeps the
// configured supplier.
func TestHousingReceiptNamesTheBillsSupplier(t *testing.T) {
	r := receiptsOn(enrollments.Housing)
	e := enrollments.Enrollment{Kind: enrollments.Housing, Currency: "RUB", AccountRef: enrollments.AccountRef{ELS: "75ДА533315"},
		ReceiptCustomer: &subscriptions.ReceiptCustomer{Email: "anna@example.com"}}
	b := enrollments.Bill{BillID: "H-1", PaymentDocumentID: "75ДА533315-01-6011", Period: "2027-02",
		Supplier: enrollments.Supplier{INN: "7743013901", Name: "ТСЖ Лесная 5"}}
	in, ok := r.Input(e, b, 123456)
	require.True(t, ok)
	require.Equal(t, gateway.ReceiptSupplier{Name: "ТСЖ Лесная 5", Phone: housingSupplier.Phone, INN: "7743013901"}, in.Supplier)
	require.Equal(t, "ЖКУ, ЕЛС 75ДА533315, ИПД 75ДА533315-01-6011, за 02.2027", in.Description)

	in, ok = r.Input(e, enrollments.Bill{BillID: "H-2"}, 100)
	require.True(t, ok)
	require.Equal(t, housingSupplier, in.Supplier)
	require.Equal(t, "ЖКУ, ЕЛС 75ДА533315, счёт H-2", in.Description)
}
