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
	// AgentType is the 54-FZ agent attribute (tags 1057/1222) of an item
	// sold on someone else's behalf, one of the Agent* names; empty for an
	// item the merchant sells itself.
	AgentType string `json:"agent_type,omitempty"`
	// Supplier is on whose behalf an agent's item is sold (tag 1224); nil
	// for an item the merchant sells itself.
	Supplier *ReceiptSupplier `json:"supplier,omitempty"`
}

// The agent types of 54-FZ's tag 1222 (1057 on the receipt as a whole),
// as YooKassa names them in a receipt item's agent_type
// (https://yookassa.ru/developers/payment-acceptance/receipts/54fz/other-services/parameters-values#agent-type,
// also https://yookassa.ru/developers/54fz/parameters-values).
const (
	AgentBankingPayment  = "banking_payment_agent"    // банковский платежный агент
	AgentBankingSubagent = "banking_payment_subagent" // банковский платежный субагент
	AgentPayment         = "payment_agent"            // платежный агент
	AgentPaymentSubagent = "payment_subagent"         // платежный субагент
	AgentAttorney        = "attorney"                 // поверенный
	AgentCommissioner    = "commissioner"             // комиссионер
	AgentOther           = "agent"                    // иной агент
)

// ReceiptSupplier is the supplier of an item sold by an agent, as 54-FZ
// requires it on the receipt from format 1.1 on: its name (tag 1225), INN
// (tag 1226) and phone (tag 1171, E.164 digits).
type ReceiptSupplier struct {
	Name  string `json:"name,omitempty"`
	Phone string `json:"phone,omitempty"`
	INN   string `json:"inn,omitempty"`
}
