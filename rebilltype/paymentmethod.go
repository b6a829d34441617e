package rebilltype

import "time"

// Limits on a payment method's fields.
const (
	maxToken = 255
	maxBrand = 32
)

// PaymentMethod is a recurring payment token and what may be shown of it.
// The token is write-only: it is never returned by the API or logged.
type PaymentMethod struct {
	Gateway  string
	Token    string
	Brand    string
	Last4    string
	ExpMonth int
	ExpYear  int
}

// Expired reports whether the card's expiry month lies before now's month.
func (pm PaymentMethod) Expired(now time.Time) bool {
	y, m, _ := now.Date()
	return pm.ExpYear < y || (pm.ExpYear == y && pm.ExpMonth < int(m))
}

// Validate checks a payment method given on its own (a card change) at
// now. Returns nil or Errors.
func (pm PaymentMethod) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs Errors
	pm.Check(&errs, "", now, knownGateway)
	return errs.Err()
}

// Check adds pm's faults to errs under field names prefixed by prefix
// ("payment_method." when it is part of a larger request).
func (pm PaymentMethod) Check(errs *Errors, prefix string, now time.Time, knownGateway func(string) bool) {
	switch {
	case pm.Gateway == "":
		errs.Add(prefix+"gateway", "is required")
	case !knownGateway(pm.Gateway):
		errs.Add(prefix+"gateway", "unknown gateway %q", pm.Gateway)
	}
	if pm.Token == "" {
		errs.Add(prefix+"token", "is required")
	} else if len(pm.Token) > maxToken || !PrintableASCII(pm.Token) || !HasVisible(pm.Token) {
		errs.Add(prefix+"token", "must be 1..%d printable ASCII characters, not only spaces", maxToken)
	}
	if len(pm.Brand) > maxBrand {
		errs.Add(prefix+"brand", "must be at most %d characters", maxBrand)
	}
	if pm.Last4 != "" && !fourDigits(pm.Last4) {
		errs.Add(prefix+"last4", "must be exactly 4 digits")
	}
	if pm.ExpMonth < 1 || pm.ExpMonth > 12 {
		errs.Add(prefix+"exp_month", "must be 1..12")
	}
	if pm.ExpYear < 2000 || pm.ExpYear > 2200 {
		errs.Add(prefix+"exp_year", "must be a four-digit year")
	}
	if pm.ExpMonth >= 1 && pm.ExpMonth <= 12 && pm.Expired(now) {
		errs.Add(prefix+"exp_year", "the card expired in %02d/%d", pm.ExpMonth, pm.ExpYear)
	}
}

func fourDigits(s string) bool {
	if len(s) != 4 {
		return false
	}
	for i := 0; i < 4; i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
