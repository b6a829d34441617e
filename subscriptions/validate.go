package subscriptions

import (
	"time"
	"unicode/utf8"

	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions/period"
)

// Limits on what a subscription may hold (Stripe's, for metadata).
const (
	maxDescription   = 500
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
	maxAmount        = 999_999_999_999 // minor units; far above any real charge
	maxIntervalCount = 365
	// MaxTrialPeriodDays bounds trial_period_days (two years, Stripe's).
	MaxTrialPeriodDays = 730
	// AnchorHorizonYears bounds how far ahead of the service clock an
	// anchor may be: further is a typo, and near year 9999 the periods
	// cannot be written as RFC 3339 at all.
	AnchorHorizonYears = 10
)

// Validate checks a subscription to create against the rules of the API
// contract at now, naming every field at fault. knownGateway tells whether
// a payment method may name a gateway. Returns nil or rebilltype.Errors.
func (n New) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs rebilltype.Errors
	if !rebilltype.ValidCustomerID(n.CustomerID) {
		errs.Add("customer_id", "must be 1..%d printable ASCII characters, not only spaces", rebilltype.MaxCustomerID)
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
	n.validateTrial(&errs, now)
	if n.PaymentMethod == (rebilltype.PaymentMethod{}) {
		errs.Add("payment_method", "is required")
	} else {
		n.PaymentMethod.Check(&errs, "payment_method.", now, knownGateway)
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

// validateTrial checks a trial: one of trial_end and trial_period_days,
// never with billing_anchor, which the trial's end sets.
func (n New) validateTrial(errs *rebilltype.Errors, now time.Time) {
	if n.TrialEnd != nil && n.TrialPeriodDays != nil {
		errs.Add("trial_end", "give trial_end or trial_period_days, not both")
		errs.Add("trial_period_days", "give trial_end or trial_period_days, not both")
	}
	if (n.TrialEnd != nil || n.TrialPeriodDays != nil) && n.BillingAnchor != nil {
		errs.Add("billing_anchor", "must be left out with a trial: a trial sets the first billing anchor (its end)")
	}
	switch {
	case n.TrialEnd == nil:
	case !n.TrialEnd.After(now):
		errs.Add("trial_end", "must be in the future (now is %s)", now.Format(time.RFC3339))
	case n.TrialEnd.After(now.AddDate(AnchorHorizonYears, 0, 0)):
		errs.Add("trial_end", "must be at most %d years ahead (now is %s)", AnchorHorizonYears, now.Format(time.RFC3339))
	}
	if n.TrialPeriodDays != nil && (*n.TrialPeriodDays < 1 || *n.TrialPeriodDays > MaxTrialPeriodDays) {
		errs.Add("trial_period_days", "must be 1..%d", MaxTrialPeriodDays)
	}
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
var Statuses = []Status{Trialing, Active, Paused, PastDue, Unpaid, Cancelled}
