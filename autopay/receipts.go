package autopay

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/enrollments"
)

// BillReceipts sends the 54-FZ receipts of bill payments: for the kinds
// of bill it names, each bill's charge carries a receipt of one item, the
// bill, with the payment agent's attributes (rebill takes the payment on
// the supplier's behalf), which its gateway files with the hold and the
// capture and, for a refund, as the refund receipt. Gateways that file no
// receipts (Stripe) ignore it. The other kinds are fiscalized by the
// gateway's own means, or not at all: rebill sends nothing.
type BillReceipts struct {
	// Kinds are the kinds of bill whose receipts rebill sends.
	Kinds map[enrollments.Kind]bool
	// AgentType is rebill's operator's agent type (54-FZ tags
	// 1057/1222), one of the gateway.Agent* names.
	AgentType string
	// VATCode is the items' VAT code in YooKassa's table
	// (https://yookassa.ru/developers/54fz/parameters-values#vat-codes):
	// 1, "без НДС", for a payment taken as an agent.
	VATCode int
	// TaxSystemCode is the operator's tax system (1..6); 0: the one set
	// up at the gateway.
	TaxSystemCode int
	// PaymentSubject is each kind's payment subject (tag 1212).
	PaymentSubject map[enrollments.Kind]string
	// Suppliers is each kind's supplier for bills that name none (tags
	// 1224-1226, 1171).
	Suppliers map[enrollments.Kind]gateway.ReceiptSupplier
}

// The payment mode of every bill's item (tag 1214): the bill is paid in
// full when the money is taken.
const billPaymentMode = "full_payment"

// BillReceipt is what one bill's receipt is made of.
type BillReceipt struct {
	Kind        enrollments.Kind
	Description string
	Amount      int64
	Currency    string
	Customer    gateway.ReceiptCustomer
	Supplier    gateway.ReceiptSupplier
}

// maxItemDescription is the longest item description a receipt takes
// (tag 1030, YooKassa's items[].description: 128 characters).
const maxItemDescription = 128

// Input is the receipt input of bill b of enrollment e for amount, and
// whether rebill sends one: the kind's receipts are rebill's and the
// enrollment names where the receipt goes. The supplier is the kind's
// configured one, or the housing bill's own when it names one.
func (r BillReceipts) Input(e enrollments.Enrollment, b enrollments.Bill, amount int64) (BillReceipt, bool) {
	if !r.Kinds[e.Kind] || e.ReceiptCustomer == nil {
		return BillReceipt{}, false
	}
	in := BillReceipt{Kind: e.Kind, Amount: amount, Currency: e.Currency, Supplier: r.Suppliers[e.Kind],
		Customer: gateway.ReceiptCustomer{Email: e.ReceiptCustomer.Email, Phone: e.ReceiptCustomer.Phone}}
	switch e.Kind {
	case enrollments.Housing:
		in.Description = fmt.Sprintf("ЖКУ, ЕЛС %s, счёт %s", e.AccountRef.ELS, b.BillID)
		if b.PaymentDocumentID != "" {
			in.Description = fmt.Sprintf("ЖКУ, ЕЛС %s, ИПД %s", e.AccountRef.ELS, b.PaymentDocumentID)
		}
		if len(b.Period) == len("2006-01") {
			in.Description += fmt.Sprintf(", за %s.%s", b.Period[5:], b.Period[:4])
		}
		// A bill that names its supplier is paid to that supplier: its
		// receipt names it, with the configured phone (bills carry none).
		if b.Supplier.INN != "" && b.Supplier.Name != "" {
			in.Supplier.INN, in.Supplier.Name = b.Supplier.INN, b.Supplier.Name
		}
	case enrollments.Fines:
		in.Description = "Штраф, УИН " + b.BillID
	}
	return in, true
}

// Receipt is the receipt of in as a bill's charge keeps it
// (gateway.Receipt as JSON).
func (r BillReceipts) Receipt(in BillReceipt) ([]byte, error) {
	description := in.Description
	if utf8.RuneCountInString(description) > maxItemDescription {
		description = string([]rune(description)[:maxItemDescription])
	}
	supplier := in.Supplier
	out, err := json.Marshal(gateway.Receipt{Customer: in.Customer, TaxSystemCode: r.TaxSystemCode,
		Items: []gateway.ReceiptItem{{Description: description, Quantity: "1", Amount: in.Amount, VATCode: r.VATCode,
			PaymentSubject: r.PaymentSubject[in.Kind], PaymentMode: billPaymentMode, AgentType: r.AgentType,
			Supplier: &supplier}}})
	if err != nil {
		return nil, fmt.Errorf("encode the receipt of a %s bill: %w", in.Kind, err)
	}
	return out, nil
}
