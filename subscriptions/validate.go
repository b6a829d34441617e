package subscriptions

import (
	"time"
	"unicode/utf8"

	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/subscriptions/period"
)

// Limits on what a subscription may hold (Stripe's, for metadata).
const (
	MaxCustomerID    = 255
	maxDescription   = 500
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
	maxToken         = 255
	maxBrand         = 32
	maxAmount        = 999_999_999_999 // minor units; far above any real charge
	maxIntervalCount = 365
	// AnchorHorizonYears bounds how far ahead of the service clock an
	// anchor may be: further is a typo, and near year 9999 the periods
	// cannot be written as RFC 3339 at all.
	AnchorHorizonYears = 10
)

// Validate checks a subscription to create against the rules of the API
// contract at now, naming every field at fault. knownGateway tells whether
// a payment method may name a gateway. Returns nil or validate.Errors.
func (n New) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs validate.Errors
	if !ValidCustomerID(n.CustomerID) {
		errs.Add("customer_id", "must be 1..%d printable ASCII characters, not only spaces", MaxCustomerID)
	}
	if n.Amount <= 0 || n.Amount > maxAmount {
		errs.Add("amount", "must be an integer number of minor units between 1 and %d", int64(maxAmount))
	}
	if _, ok := validate.Currency(n.Currency); !ok {
		errs.Add("currency", "must be an active ISO 4217 code in upper case, e.g. USD")
	}
	if _, err := period.ParseInterval(string(n.Interval)); err != nil {
		errs.Add("interval", "must be one of day, week, month, quarter, year")
	}
	if n.IntervalCount < 1 || n.IntervalCount > maxIntervalCount {
		errs.Add("interval_count", "must be 1..%d", maxIntervalCount)
	}
	if _, err := validate.TimeZone(n.TimeZone); err != nil {
		errs.Add("timezone", "must be an IANA time zone name, e.g. Europe/Moscow")
	}
	switch {
	case n.BillingAnchor == nil:
	case n.BillingAnchor.Before(now.Truncate(time.Second)):
		errs.Add("billing_anchor", "must not be in the past (now is %s)", now.Format(time.RFC3339))
	case n.BillingAnchor.After(now.AddDate(AnchorHorizonYears, 0, 0)):
		errs.Add("billing_anchor", "must be at most %d years ahead (now is %s)", AnchorHorizonYears, now.Format(time.RFC3339))
	}
	if n.PaymentMethod == (PaymentMethod{}) {
		errs.Add("payment_method", "is required")
	} else {
		n.PaymentMethod.validate(&errs, "payment_method.", now, knownGateway)
	}
	if utf8.RuneCountInString(n.Description) > maxDescription {
		errs.Add("description", "must be at most %d characters", maxDescription)
	}
	if len(n.Metadata) > maxMetadataKeys {
		errs.Add("metadata", "at most %d keys", maxMetadataKeys)
	}
	if n.Receipt != nil {
		n.Receipt.validate(&errs, "receipt.", n.Amount)
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

// Validate checks a payment method given on its own (a card change) at
// now. Returns nil or validate.Errors.
func (pm PaymentMethod) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs validate.Errors
	pm.validate(&errs, "", now, knownGateway)
	return errs.Err()
}

// validate adds pm's faults to errs under field names prefixed by prefix.
func (pm PaymentMethod) validate(errs *validate.Errors, prefix string, now time.Time, knownGateway func(string) bool) {
	switch {
	case pm.Gateway == "":
		errs.Add(prefix+"gateway", "is required")
	case !knownGateway(pm.Gateway):
		errs.Add(prefix+"gateway", "unknown gateway %q", pm.Gateway)
	}
	if pm.Token == "" {
		errs.Add(prefix+"token", "is required")
	} else if len(pm.Token) > maxToken || !validate.PrintableASCII(pm.Token) || !validate.HasVisible(pm.Token) {
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

// ValidCustomerID reports whether s may be a customer id: the key that
// scopes API keys, lists and idempotency. One made only of spaces would
// look empty in every list and log.
func ValidCustomerID(s string) bool {
	return s != "" && len(s) <= MaxCustomerID && validate.PrintableASCII(s) && validate.HasVisible(s)
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

// ParseStatus reads a status filter. ok is false for anything that is not
// a status.
func ParseStatus(s string) (Status, bool) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// Statuses lists every status, in the order of the life cycle.
var Statuses = []Status{Active, Paused, PastDue, Unpaid, Cancelled}
