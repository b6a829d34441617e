package subscriptions

import (
	"math/big"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rebill/rebill/rebilltype"
)

// Receipt is the fiscal receipt (Russia's 54-FZ) that every payment of the
// subscription carries: the customer's contact where the tax service sends
// it, and the items paid for with their VAT codes. Providers that fiscalize
// on the merchant's behalf (YooKassa) send it with the hold and the
// capture; the others ignore it. Its JSON is the API's and the gateways'
// (charges/gateway.Receipt).
type Receipt struct {
	Customer      ReceiptCustomer `json:"customer"`
	Items         []ReceiptItem   `json:"items"`
	TaxSystemCode int             `json:"tax_system_code,omitempty"`
}

// ReceiptCustomer is an e-mail address or a phone number (or both).
type ReceiptCustomer struct {
	Email string `json:"email,omitempty"`
	Phone string `json:"phone,omitempty"`
}

// ReceiptItem is one line: Quantity units (a decimal string, up to three
// places, as fiscal registers take it) at Amount minor units each.
type ReceiptItem struct {
	Description    string `json:"description"`
	Quantity       string `json:"quantity"`
	Amount         int64  `json:"amount"`
	VATCode        int    `json:"vat_code"`
	PaymentSubject string `json:"payment_subject,omitempty"`
	PaymentMode    string `json:"payment_mode,omitempty"`
}

// Limits of a receipt (YooKassa's).
const (
	maxReceiptItems        = 100
	maxItemDescription     = 128
	maxReceiptEmail        = 254
	minVATCode, maxVATCode = 1, 12
)

var (
	// quantityPattern is a positive decimal with at most 3 places.
	quantityPattern = regexp.MustCompile(`^[0-9]{1,6}(\.[0-9]{1,3})?$`)
	// phonePattern is an ITU-T E.164 number, country code first.
	phonePattern = regexp.MustCompile(`^\+?[1-9][0-9]{9,14}$`)
	// codePattern is a fiscal enumeration value (payment_subject, payment_mode).
	codePattern = regexp.MustCompile(`^[a-z][a-z_-]{0,63}$`)
)

// validate checks the receipt of a subscription of amount, naming every
// field at fault under prefix: the items' sum must be the amount charged.
func (r Receipt) validate(errs *rebilltype.Errors, prefix string, amount int64) {
	r.Customer.Validate(errs, prefix+"customer")
	if r.TaxSystemCode != 0 && (r.TaxSystemCode < 1 || r.TaxSystemCode > 6) {
		errs.Add(prefix+"tax_system_code", "must be 1..6")
	}
	if len(r.Items) == 0 || len(r.Items) > maxReceiptItems {
		errs.Add(prefix+"items", "must list 1..%d items", maxReceiptItems)
		return
	}
	total := new(big.Int) // in thousandths of a minor unit
	itemsOK := true
	for i, it := range r.Items {
		field := prefix + "items[" + strconv.Itoa(i) + "]."
		if it.Description == "" || utf8.RuneCountInString(it.Description) > maxItemDescription {
			errs.Add(field+"description", "must be 1..%d characters", maxItemDescription)
		}
		thousandths, ok := quantityThousandths(it.Quantity)
		if !ok {
			errs.Add(field+"quantity", `must be a positive decimal string with at most 3 places, e.g. "1" or "0.5"`)
			itemsOK = false
		}
		if it.Amount <= 0 || it.Amount > maxAmount {
			errs.Add(field+"amount", "must be the price of one unit in minor units, 1..%d", int64(maxAmount))
			itemsOK = false
		}
		if it.VATCode < minVATCode || it.VATCode > maxVATCode {
			errs.Add(field+"vat_code", "must be %d..%d", minVATCode, maxVATCode)
		}
		if it.PaymentSubject != "" && !codePattern.MatchString(it.PaymentSubject) {
			errs.Add(field+"payment_subject", "must be a fiscal payment subject such as service")
		}
		if it.PaymentMode != "" && !codePattern.MatchString(it.PaymentMode) {
			errs.Add(field+"payment_mode", "must be a fiscal payment mode such as full_payment")
		}
		if ok {
			total.Add(total, new(big.Int).Mul(big.NewInt(thousandths), big.NewInt(it.Amount)))
		}
	}
	if itemsOK && total.Cmp(new(big.Int).Mul(big.NewInt(amount), big.NewInt(1000))) != 0 {
		errs.Add(prefix+"items", "must add up to the subscription's amount (%d): quantity times amount, summed", amount)
	}
}

// quantityThousandths parses a receipt quantity into thousandths.
func quantityThousandths(q string) (int64, bool) {
	if !quantityPattern.MatchString(q) {
		return 0, false
	}
	whole, frac, _ := strings.Cut(q, ".")
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "000")[:3], 10, 64)
	n := w*1000 + f
	return n, n > 0
}

// Repriced is the receipt of a payment of amount other than the
// subscription's (a proration's adjustment, a charge reduced by credit):
// its first item, one unit at amount, so that the items still add up to
// what is paid.
func (r Receipt) Repriced(amount int64) Receipt {
	out := r
	if len(r.Items) > 0 {
		item := r.Items[0]
		item.Quantity, item.Amount = "1", amount
		out.Items = []ReceiptItem{item}
	}
	return out
}

// Validate checks where a receipt is sent, naming every field at fault
// under field: an e-mail address or an E.164 phone number is required.
func (c ReceiptCustomer) Validate(errs *rebilltype.Errors, field string) {
	if c.Email == "" && c.Phone == "" {
		errs.Add(field, "needs an email or a phone, where the receipt is sent")
	}
	if e := c.Email; e != "" {
		if addr, err := mail.ParseAddress(e); err != nil || addr.Address != e || len(e) > maxReceiptEmail {
			errs.Add(field+".email", "must be a plain e-mail address such as user@example.com")
		}
	}
	if p := c.Phone; p != "" && !phonePattern.MatchString(p) {
		errs.Add(field+".phone", "must be an E.164 number, country code first, e.g. 79001234567")
	}
}
