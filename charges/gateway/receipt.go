package gateway

// Receipt is the fiscal receipt that Russian law (54-FZ) requires for a
// payment from a person: providers that fiscalize on the merchant's behalf
// (YooKassa) send it to the tax service with the hold and the capture.
// Providers that do not fiscalize ignore it.
type Receipt struct {
	Customer ReceiptCustomer `json:"customer"`
	Items    []ReceiptItem   `json:"items"`
	// TaxSystemCode is the merchant's tax system (1..6); zero: the one set
	// up in the provider's account.
	TaxSystemCode int `json:"tax_system_code,omitempty"`
}

// ReceiptCustomer is where the tax service sends the receipt: an e-mail
// address or a phone number.
type ReceiptCustomer struct {
	Email string `json:"email,omitempty"`
	Phone string `json:"phone,omitempty"`
}

// ReceiptItem is one line of a receipt. Amount is the price of one unit in
// the payment's currency, in minor units.
type ReceiptItem struct {
	Description    string `json:"description"`
	Quantity       string `json:"quantity"`
	Amount         int64  `json:"amount"`
	VATCode        int    `json:"vat_code"`
	PaymentSubject string `json:"payment_subject,omitempty"`
	PaymentMode    string `json:"payment_mode,omitempty"`
}
