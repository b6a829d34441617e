// Package apiobjects holds the JSON shapes of rebill's objects as their GET
// endpoints return them. The api encodes responses with them and notify
// stores them as an event's data.object, so that an event shows the object
// exactly as it was read at that moment, without the domain packages (or
// notify) importing the HTTP layer.
package apiobjects

import (
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/subscriptions"
)

// Period is a billing period.
type Period struct {
	Key   string    `json:"key"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Pause is a subscription's pause.
type Pause struct {
	PausedAt time.Time  `json:"paused_at"`
	ResumeAt *time.Time `json:"resume_at"`
	// OnResume is what the resume does: start_new_period or
	// continue_period.
	OnResume string `json:"on_resume"`
}

// PaymentMethod is a card without its token.
type PaymentMethod struct {
	Gateway  string  `json:"gateway"`
	Brand    *string `json:"brand"`
	Last4    *string `json:"last4"`
	ExpMonth int     `json:"exp_month"`
	ExpYear  int     `json:"exp_year"`
}

// Subscription is GET /v1/subscriptions/{id}.
type Subscription struct {
	ID                uuid.UUID         `json:"id"`
	CustomerID        string            `json:"customer_id"`
	Status            string            `json:"status"`
	Amount            int64             `json:"amount"`
	Currency          string            `json:"currency"`
	Interval          string            `json:"interval"`
	IntervalCount     int               `json:"interval_count"`
	TimeZone          string            `json:"timezone"`
	BillingAnchor     time.Time         `json:"billing_anchor"`
	CurrentPeriod     Period            `json:"current_period"`
	NextChargeAt      *time.Time        `json:"next_charge_at"`
	CancelAtPeriodEnd bool              `json:"cancel_at_period_end"`
	Pause             *Pause            `json:"pause"`
	PaymentMethod     PaymentMethod     `json:"payment_method"`
	Description       *string           `json:"description"`
	Metadata          map[string]string `json:"metadata"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	CancelledAt       *time.Time        `json:"cancelled_at"`
	// TrialEnd is when its trial ends (or ended); null without a trial.
	TrialEnd *time.Time `json:"trial_end"`
	// Receipt is the 54-FZ fiscal receipt its payments carry; null when none.
	Receipt *subscriptions.Receipt `json:"receipt"`
	// Experiments are the experiment arms it was assigned, by experiment
	// key; {} when none.
	Experiments map[string]string `json:"experiments"`
	// PendingUpdate is the change waiting for the current period's end;
	// null when none waits.
	PendingUpdate *PendingUpdate `json:"pending_update"`
	// CreditBalance is credit, in minor units of Currency, that reduces the
	// next charges.
	CreditBalance int64 `json:"credit_balance"`
}

// PendingUpdate is a change of a subscription's terms that applies at
// EffectiveAt. A null field is a term the change keeps as it is, so that a
// reader sees exactly what will differ.
type PendingUpdate struct {
	ID            uuid.UUID              `json:"id"`
	Amount        *int64                 `json:"amount"`
	Interval      *string                `json:"interval"`
	IntervalCount *int                   `json:"interval_count"`
	Description   *string                `json:"description"`
	Metadata      map[string]string      `json:"metadata"`
	Receipt       *subscriptions.Receipt `json:"receipt"`
	EffectiveAt   time.Time              `json:"effective_at"`
	CreatedAt     time.Time              `json:"created_at"`
}

// FromPendingUpdate is p as a subscription shows it; nil for nil.
func FromPendingUpdate(p *subscriptions.PendingUpdate) *PendingUpdate {
	if p == nil {
		return nil
	}
	out := &PendingUpdate{ID: p.ID, Amount: p.Amount, IntervalCount: p.IntervalCount, Description: p.Description,
		Metadata: p.Metadata, Receipt: p.Receipt, EffectiveAt: p.EffectiveAt.UTC(), CreatedAt: p.CreatedAt.UTC()}
	if p.Interval != nil {
		iv := string(*p.Interval)
		out.Interval = &iv
	}
	return out
}

// Optional is nil for the empty string.
func Optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// UTCPtr is t in UTC, nil for nil.
func UTCPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// FromSubscription is s as its GET returns it.
func FromSubscription(s subscriptions.Subscription) Subscription {
	p := s.CurrentPeriod()
	out := Subscription{
		ID: s.ID, CustomerID: s.CustomerID, Status: string(s.Status), Amount: s.Amount, Currency: s.Currency,
		Interval: string(s.Interval), IntervalCount: s.IntervalCount, TimeZone: s.TimeZone,
		BillingAnchor:     s.BillingAnchor,
		CurrentPeriod:     Period{Key: p.Key, Start: p.Start, End: p.End},
		CancelAtPeriodEnd: s.CancelAtPeriodEnd,
		PaymentMethod: PaymentMethod{
			Gateway: s.PaymentMethod.Gateway, Brand: Optional(s.PaymentMethod.Brand), Last4: Optional(s.PaymentMethod.Last4),
			ExpMonth: s.PaymentMethod.ExpMonth, ExpYear: s.PaymentMethod.ExpYear,
		},
		Description: Optional(s.Description), Metadata: s.Metadata,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, CancelledAt: UTCPtr(s.CancelledAt), Receipt: s.Receipt,
		Experiments:   record(s.Experiments),
		PendingUpdate: FromPendingUpdate(s.PendingUpdate), CreditBalance: s.CreditBalance,
		TrialEnd: UTCPtr(s.TrialEnd),
	}
	if s.Status != subscriptions.Cancelled && s.Status != subscriptions.Paused && s.Status != subscriptions.Unpaid {
		next := s.NextChargeAt
		out.NextChargeAt = &next
	}
	if s.PausedAt != nil {
		out.Pause = &Pause{PausedAt: s.PausedAt.UTC(), ResumeAt: UTCPtr(s.ResumeAt), OnResume: string(s.OnResume)}
	}
	return out
}

// Charge is GET /v1/charges/{id}.
type Charge struct {
	ID             uuid.UUID  `json:"id"`
	SubscriptionID *uuid.UUID `json:"subscription_id"`
	EnrollmentID   *uuid.UUID `json:"enrollment_id"`
	PeriodKey      string     `json:"period_key"`
	Key            string     `json:"key"`
	Amount         int64      `json:"amount"`
	Currency       string     `json:"currency"`
	Gateway        string     `json:"gateway"`
	Status         string     `json:"status"`
	AttemptCount   int        `json:"attempt_count"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	FailureCode    *string    `json:"failure_code"`
	ReviewReason   *string    `json:"review_reason"`
	// ReviewCode is why the charge went to review, from a closed set
	// (charges.ReviewCodes); ReviewReason is its sentence for people.
	ReviewCode *string `json:"review_code"`
	// ConfirmationRequired and ConfirmedAmount: a bill's charge whose new
	// attempt awaits the customer's confirmation, and what they confirmed.
	ConfirmationRequired bool      `json:"confirmation_required"`
	ConfirmedAmount      *int64    `json:"confirmed_amount"`
	CreatedAt            time.Time `json:"created_at"`
	UpdatedAt            time.Time `json:"updated_at"`
	// Experiments are the experiment arms that govern its policies, by
	// experiment key; {} when none.
	Experiments map[string]string `json:"experiments"`
	// AmountRefunded is what its succeeded refunds returned; the status
	// stays succeeded.
	AmountRefunded int64 `json:"amount_refunded"`
}

// Refund is one return of a charge's captured money: an element of GET
// /v1/charges/{id}/refunds, the answer of its POST, and the object of the
// refund.* events.
type Refund struct {
	ID          uuid.UUID  `json:"id"`
	ChargeID    uuid.UUID  `json:"charge_id"`
	Amount      int64      `json:"amount"`
	Currency    string     `json:"currency"`
	Reason      string     `json:"reason"`
	Status      string     `json:"status"`
	FailureCode *string    `json:"failure_code"`
	Evidence    *string    `json:"evidence"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	SettledAt   *time.Time `json:"settled_at"`
}

// FromRefund is r as the API shows it. The gateway's key and reference
// and who asked stay inside: support sees them in the console. A refund
// whose answer was lost (unknown) is shown pending: to a client it is
// still on its way, and the look-up settles it.
func FromRefund(r charges.Refund) Refund {
	status := r.Status
	if status == charges.RefundUnknown {
		status = charges.RefundPending
	}
	return Refund{ID: r.ID, ChargeID: r.ChargeID, Amount: r.Amount, Currency: r.Currency, Reason: string(r.Reason),
		Status: string(status), FailureCode: Optional(r.FailureCode), Evidence: Optional(r.Evidence),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SettledAt: UTCPtr(r.SettledAt)}
}

// record is an experiment record as objects show it: {} rather than null.
func record(rec map[string]string) map[string]string {
	if rec == nil {
		return map[string]string{}
	}
	return rec
}

// FromCharge is c as its GET returns it.
func FromCharge(c charges.Charge) Charge {
	out := Charge{ID: c.ID, PeriodKey: c.PeriodKey, Key: c.Key(),
		Amount: c.Amount, Currency: c.Currency, Gateway: c.Gateway, Status: string(c.Status),
		AttemptCount: c.AttemptCount, NextAttemptAt: UTCPtr(c.NextAttemptAt), FailureCode: Optional(c.FailureCode),
		ReviewReason: Optional(c.ReviewReason), ReviewCode: Optional(string(c.ReviewCode)), ConfirmationRequired: c.ConfirmationRequired,
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, Experiments: record(c.Experiments()), AmountRefunded: c.AmountRefunded}
	if c.ConfirmedAmount != 0 {
		confirmed := c.ConfirmedAmount
		out.ConfirmedAmount = &confirmed
	}
	owner := c.OwnerID()
	if c.EnrollmentID != uuid.Nil {
		out.EnrollmentID = &owner
	} else {
		out.SubscriptionID = &owner
	}
	return out
}
