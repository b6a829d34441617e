package yookassa

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// Payment statuses of API v3.
const (
	statusPending           = "pending"
	statusWaitingForCapture = "waiting_for_capture"
	statusSucceeded         = "succeeded"
	statusCanceled          = "canceled"
)

// Metadata keys under which rebill files its keys on every payment: the
// list endpoint cannot filter by metadata, so a payment whose id was lost
// is recognised by these.
const (
	metaChargeKey  = "rebill_charge_key"
	metaGatewayKey = "rebill_gateway_key"
)

type amount struct {
	Value    string `json:"value"`
	Currency string `json:"currency"`
}

type createPayment struct {
	Amount          amount            `json:"amount"`
	Capture         bool              `json:"capture"`
	PaymentMethodID string            `json:"payment_method_id"`
	Description     string            `json:"description,omitempty"`
	Metadata        map[string]string `json:"metadata"`
	Receipt         *receipt          `json:"receipt,omitempty"`
}

type capturePayment struct {
	Amount  amount   `json:"amount"`
	Receipt *receipt `json:"receipt,omitempty"`
}

type receipt struct {
	Customer      receiptCustomer `json:"customer"`
	Items         []receiptItem   `json:"items"`
	TaxSystemCode int             `json:"tax_system_code,omitempty"`
}

type receiptCustomer struct {
	Email string `json:"email,omitempty"`
	Phone string `json:"phone,omitempty"`
}

type receiptItem struct {
	Description    string      `json:"description"`
	Quantity       json.Number `json:"quantity"`
	Amount         amount      `json:"amount"`
	VATCode        int         `json:"vat_code"`
	PaymentSubject string      `json:"payment_subject,omitempty"`
	PaymentMode    string      `json:"payment_mode,omitempty"`
	// AgentType and Supplier are the payment agent's attributes of an
	// item paid on a supplier's behalf: items[].agent_type and
	// items[].supplier {name, phone, inn}
	// (https://yookassa.ru/developers/payment-acceptance/receipts/54fz/other-services/parameters-values#agent-type).
	AgentType string           `json:"agent_type,omitempty"`
	Supplier  *receiptSupplier `json:"supplier,omitempty"`
}

type receiptSupplier struct {
	Name  string `json:"name,omitempty"`
	Phone string `json:"phone,omitempty"`
	INN   string `json:"inn,omitempty"`
}

type payment struct {
	ID                  string               `json:"id"`
	Status              string               `json:"status"`
	Paid                bool                 `json:"paid"`
	Amount              amount               `json:"amount"`
	CreatedAt           time.Time            `json:"created_at"`
	CapturedAt          *time.Time           `json:"captured_at,omitempty"`
	ExpiresAt           *time.Time           `json:"expires_at,omitempty"`
	Metadata            map[string]string    `json:"metadata,omitempty"`
	CancellationDetails *cancellationDetails `json:"cancellation_details,omitempty"`
}

type cancellationDetails struct {
	Party  string `json:"party"`
	Reason string `json:"reason"`
}

// reason is why the payment was canceled; empty unless it was.
func (p payment) reason() string {
	if p.CancellationDetails == nil {
		return ""
	}
	return p.CancellationDetails.Reason
}

type paymentList struct {
	Items      []payment `json:"items"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// apiErrorBody is YooKassa's error object; the 202 "processing" answer
// has the same shape with type "processing" and retry_after.
type apiErrorBody struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	Description string `json:"description"`
	Parameter   string `json:"parameter"`
	RetryAfter  int64  `json:"retry_after"` // milliseconds
}

// quantityPattern is a receipt quantity as YooKassa takes it: a positive
// decimal with at most three places.
var quantityPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,3})?$`)

// toReceipt writes a fiscal receipt in the payment's currency.
func toReceipt(r *gateway.Receipt, currency string) (*receipt, error) {
	if r == nil {
		return nil, nil
	}
	if r.Customer.Email == "" && r.Customer.Phone == "" {
		return nil, fmt.Errorf("receipt: the customer needs an e-mail address or a phone number")
	}
	if len(r.Items) == 0 {
		return nil, fmt.Errorf("receipt: no items")
	}
	out := &receipt{Customer: receiptCustomer(r.Customer), TaxSystemCode: r.TaxSystemCode, Items: make([]receiptItem, len(r.Items))}
	for i, it := range r.Items {
		if !quantityPattern.MatchString(it.Quantity) {
			return nil, fmt.Errorf("receipt: item %d: quantity %q is not a decimal with at most 3 places", i, it.Quantity)
		}
		value, err := formatAmount(it.Amount, currency)
		if err != nil {
			return nil, fmt.Errorf("receipt: item %d: %w", i, err)
		}
		out.Items[i] = receiptItem{Description: it.Description, Quantity: json.Number(it.Quantity),
			Amount: amount{Value: value, Currency: currency}, VATCode: it.VATCode,
			PaymentSubject: it.PaymentSubject, PaymentMode: it.PaymentMode, AgentType: it.AgentType}
		if it.Supplier != nil {
			out.Items[i].Supplier = (*receiptSupplier)(it.Supplier)
		}
	}
	return out, nil
}
