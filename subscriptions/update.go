package subscriptions

import (
	"github.com/rebill/rebill/subscriptions/period"
)

// Effective is when an update applies.
type Effective string

const (
	// EffectiveNow applies the update at once, prorated by its Proration.
	EffectiveNow Effective = "now"
	// EffectivePeriodEnd makes the update the subscription's
	// PendingUpdate, applied exactly at the current period's end.
	EffectivePeriodEnd Effective = "period_end"
)

// Proration is what an immediate change does about the unused part of
// the current period.
type Proration string

const (
	// ProrationNone: the new terms from the next period; nothing now.
	ProrationNone Proration = "none"
	// ProrationChargeNow: an upgrade's unused difference is charged now as
	// an adjustment charge; a downgrade's is credited to the next charges.
	ProrationChargeNow Proration = "charge_now"
	// ProrationCreditNext: a downgrade's unused difference is credited to
	// the next charges; an upgrade's is not charged.
	ProrationCreditNext Proration = "credit_next"
)

// Update is a requested change of a subscription's terms. Nil fields keep
// the current value.
type Update struct {
	Amount        *int64
	Currency      string // empty, or the subscription's own: a currency never changes
	Interval      *period.Interval
	IntervalCount *int
	Description   *string
	Metadata      map[string]string // nil: unchanged
	Receipt       *Receipt
	Effective     Effective
	// Proration is the staff's choice; empty for a customer key, which
	// gets the configured default.
	Proration Proration
}
