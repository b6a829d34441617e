package enrollments

import (
	"errors"
	"time"
	"unicode/utf8"

	"github.com/rebill/rebill/internal/validate"
	"github.com/rebill/rebill/subscriptions"
)

// Limits on an enrollment and its bills.
const (
	maxDescription   = 500
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
	maxAmount        = 999_999_999_999
	// refLength is the length of an ELS, an STS and a driving licence.
	refLength = 10
	// billHorizon bounds how far from the service clock a bill's dates
	// may lie: further is a typo.
	billHorizon = 5 * 365 * 24 * time.Hour
)

// New is a request to create an enrollment.
type New struct {
	CustomerID    string
	Kind          Kind
	AccountRef    AccountRef
	Currency      string
	MaxAmount     int64
	PayDay        int // 0: on arrival
	PaymentMethod subscriptions.PaymentMethod
	Description   string
	Metadata      map[string]string
}

// Validate checks an enrollment to create at now, naming every field at
// fault. knownGateway tells whether a payment method may name a gateway.
// Returns nil or validate.Errors.
func (n New) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs validate.Errors
	if !subscriptions.ValidCustomerID(n.CustomerID) {
		errs.Add("customer_id", "must be 1..%d printable ASCII characters, not only spaces", subscriptions.MaxCustomerID)
	}
	switch n.Kind {
	case Housing:
		if !ValidELS(n.AccountRef.ELS) {
			errs.Add("account_ref", "must be the 10-character single personal account number (ELS): digits and capital Latin letters")
		}
		if n.PayDay != 0 && (n.PayDay < 1 || n.PayDay > 28) {
			errs.Add("pay_day", "must be 1..28")
		}
	case Fines:
		ref := n.AccountRef
		if ref.ELS != "" || (ref.STS == "" && ref.DriverLicense == "") {
			errs.Add("account_ref", `must be an object with "sts" and/or "driver_license"`)
		}
		if ref.STS != "" && !ValidVehicleDocument(ref.STS) {
			errs.Add("account_ref.sts", "must be 10 characters: digits and capital letters (Cyrillic or Latin), e.g. 77УА123456")
		}
		if ref.DriverLicense != "" && !ValidVehicleDocument(ref.DriverLicense) {
			errs.Add("account_ref.driver_license", "must be 10 characters: digits and capital letters (Cyrillic or Latin), e.g. 7712345678")
		}
		if n.PayDay != 0 {
			errs.Add("pay_day", "applies to housing only: fines are paid on arrival")
		}
	default:
		errs.Add("kind", "must be housing or fines")
	}
	if n.Currency != "RUB" {
		errs.Add("currency", "must be RUB")
	}
	if n.MaxAmount <= 0 || n.MaxAmount > maxAmount {
		errs.Add("max_amount", "must be an integer number of kopecks between 1 and %d", int64(maxAmount))
	}
	if n.PaymentMethod == (subscriptions.PaymentMethod{}) {
		errs.Add("payment_method", "is required")
	} else if fields := (validate.Errors{}); errors.As(n.PaymentMethod.Validate(now, knownGateway), &fields) {
		for _, f := range fields {
			errs.Add("payment_method."+f.Field, "%s", f.Message)
		}
	}
	if utf8.RuneCountInString(n.Description) > maxDescription {
		errs.Add("description", "must be at most %d characters", maxDescription)
	}
	if len(n.Metadata) > maxMetadataKeys {
		errs.Add("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range n.Metadata {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKey {
			errs.Add("metadata", "keys must be 1..%d characters", maxMetadataKey)
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			errs.Add("metadata."+k, "must be at most %d characters", maxMetadataValue)
		}
	}
	return errs.Err()
}

// ValidELS reports whether s is a single personal account number of GIS
// ZhKKh: 10 characters, digits and capital Latin letters.
func ValidELS(s string) bool {
	if len(s) != refLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9') && !('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// ValidVehicleDocument reports whether s may be an STS or a driving
// licence number: 10 characters, digits and capital letters, Cyrillic
// ones too (the series of both documents are written in Cyrillic).
func ValidVehicleDocument(s string) bool {
	if utf8.RuneCountInString(s) != refLength || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case '0' <= r && r <= '9', 'A' <= r && r <= 'Z', 'А' <= r && r <= 'Я', r == 'Ё':
		default:
			return false
		}
	}
	return true
}

// ValidUIN reports whether s is a payment identifier (UIN) of GIS GMP: 20
// or 25 digits whose last is the check digit. The check digit is the sum
// of the other digits weighted 1..10 repeating, modulo 11; a remainder of
// 10 is computed again with weights 3..12 repeating, and 10 once more
// gives 0.
func ValidUIN(s string) bool {
	if len(s) != 20 && len(s) != 25 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return UINCheckDigit(s[:len(s)-1]) == int(s[len(s)-1]-'0')
}

// UINCheckDigit computes the check digit of the digits of a UIN before
// its last (see ValidUIN).
func UINCheckDigit(body string) int {
	sum := func(start int) int {
		total := 0
		for i := 0; i < len(body); i++ {
			weight := start + i%10
			total += int(body[i]-'0') * weight
		}
		return total % 11
	}
	r := sum(1)
	if r == 10 {
		r = sum(3)
	}
	if r == 10 {
		r = 0
	}
	return r
}

// BillInput is a bill as an issuer (or the API) sends it.
type BillInput struct {
	BillID           string
	Amount           int64
	IssuedAt         time.Time
	DueDate          Date
	DiscountDeadline *Date
	DiscountedAmount *int64
}

// Validate checks a bill for an enrollment of kind at now. Returns nil or
// validate.Errors.
func (b BillInput) Validate(kind Kind, now time.Time) error {
	var errs validate.Errors
	switch {
	case kind == Fines && !ValidUIN(b.BillID):
		errs.Add("bill_id", "must be the fine's payment identifier (UIN): 20 or 25 digits with a valid check digit")
	case kind != Fines && (b.BillID == "" || len(b.BillID) > 64 || !validate.PrintableASCII(b.BillID) || !validate.HasVisible(b.BillID)):
		errs.Add("bill_id", "must be 1..64 printable ASCII characters, not only spaces")
	}
	if b.Amount <= 0 || b.Amount > maxAmount {
		errs.Add("amount", "must be an integer number of kopecks between 1 and %d", int64(maxAmount))
	}
	if b.IssuedAt.IsZero() {
		errs.Add("issued_at", "is required: an RFC 3339 time")
	} else if b.IssuedAt.After(now.Add(24*time.Hour)) || b.IssuedAt.Before(now.Add(-billHorizon)) {
		errs.Add("issued_at", "must not lie in the future, nor more than 5 years back (now is %s)", now.Format(time.RFC3339))
	}
	if b.DueDate.IsZero() {
		errs.Add("due_date", "is required: a date YYYY-MM-DD")
	} else if !b.IssuedAt.IsZero() && b.DueDate.Before(DateOf(b.IssuedAt)) {
		errs.Add("due_date", "must not be before the day of issued_at")
	} else if b.DueDate.Start().After(now.Add(billHorizon)) {
		errs.Add("due_date", "must be within 5 years")
	}
	switch {
	case (b.DiscountDeadline == nil) != (b.DiscountedAmount == nil):
		errs.Add("discounted_amount", "discounted_amount and discount_deadline come together")
	case b.DiscountDeadline != nil && kind != Fines:
		errs.Add("discount_deadline", "applies to fines only")
	case b.DiscountDeadline != nil:
		if *b.DiscountedAmount <= 0 || *b.DiscountedAmount >= b.Amount {
			errs.Add("discounted_amount", "must be between 1 and amount - 1")
		}
		if b.DiscountDeadline.IsZero() {
			errs.Add("discount_deadline", "must be a date YYYY-MM-DD")
		} else if !b.IssuedAt.IsZero() && b.DiscountDeadline.Before(DateOf(b.IssuedAt)) {
			errs.Add("discount_deadline", "must not be before the day of issued_at")
		} else if !b.DueDate.IsZero() && b.DueDate.Before(*b.DiscountDeadline) {
			errs.Add("discount_deadline", "must not be after due_date")
		}
	}
	return errs.Err()
}
