package autopay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/zhkh"
)

var _ charges.BillOwner = Outcomes{}

// Outcomes moves bills as their charges settle: the port of enrollments
// as owners of charges (charges.Owner; the ids it gets are enrollments').
type Outcomes struct {
	Enrollments *enrollments.Store
	Rules       enrollments.Rules
	// Reports is told of every captured housing payment, in the
	// transaction that records the capture: GIS ZhKH hears of money that
	// moved, never of a hold (zhkh). Nil: none is reported (no GIS ZhKH
	// party configured).
	Reports HousingReports
}

// HousingReports reports captured housing payments to GIS ZhKH
// (zhkh.Reporter).
type HousingReports interface {
	Captured(ctx context.Context, tx pgx.Tx, c zhkh.Capture) error
}

// Lock locks the enrollment's row and returns what a charge outcome needs
// of it: its card, whether it is cancelled, and the bills' dunning (fitted
// to each bill's discount deadline and last payable day).
func (o Outcomes) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.OwnerState, error) {
	e, err := o.Enrollments.GetForUpdate(ctx, tx, id)
	if err != nil {
		return charges.OwnerState{}, err
	}
	expiries, err := o.expiries(ctx, tx, id)
	if err != nil {
		return charges.OwnerState{}, err
	}
	rules := o.Rules
	return charges.OwnerState{Gateway: e.PaymentMethod.Gateway, Token: e.PaymentMethod.Token,
		Cancelled: e.Status == enrollments.Cancelled,
		NextAttempt: func(c charges.Charge, first time.Time) (time.Time, bool) {
			expires, ok := expiries[c.ID]
			if !ok {
				return time.Time{}, false // the bill is no longer being paid (withdrawn, expired)
			}
			return rules.NextAttempt(c.AttemptCount, c.AttemptTimes, first, c.DiscountUntil, expires)
		}}, nil
}

// expiries maps the charges of the enrollment's bills being paid to the
// ends of their last payable days.
func (o Outcomes) expiries(ctx context.Context, tx pgx.Tx, id uuid.UUID) (map[uuid.UUID]time.Time, error) {
	bills, err := o.Enrollments.Payable(ctx, tx, id, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("bills of enrollment %s: %w", id, err)
	}
	out := make(map[uuid.UUID]time.Time, len(bills))
	for _, b := range bills {
		if b.Status == enrollments.BillPaying {
			out[*b.ChargeID] = b.ExpiresAt
		}
	}
	return out, nil
}

// ChargePaid marks the charge's bill paid and, when its money was
// captured for a housing bill, has the payment reported to GIS ZhKH. A
// charge voided as not owed is reported to nobody.
func (o Outcomes) ChargePaid(ctx context.Context, tx pgx.Tx, c charges.Charge, _ bool) (*time.Time, error) {
	if err := o.Enrollments.ChargeOutcome(ctx, tx, c.ID, true, c.Amount); err != nil {
		return nil, err
	}
	if o.Reports == nil || c.Status != charges.Succeeded {
		return nil, nil
	}
	e, err := o.Enrollments.Get(ctx, tx, c.EnrollmentID)
	if err != nil {
		return nil, fmt.Errorf("enrollment of captured charge %s: %w", c.ID, err)
	}
	if e.Kind != enrollments.Housing {
		return nil, nil
	}
	b, err := o.Enrollments.GetBill(ctx, tx, e.ID, c.PeriodKey)
	if err != nil {
		return nil, fmt.Errorf("bill %s of captured charge %s: %w", c.PeriodKey, c.ID, err)
	}
	return nil, o.Reports.Captured(ctx, tx, zhkh.Capture{ChargeID: c.ID, EnrollmentID: e.ID, Account: e.AccountRef.ELS,
		BillID: c.PeriodKey, Amount: c.Amount, Currency: c.Currency, CapturedAt: c.UpdatedAt,
		PaymentDocumentID: b.PaymentDocumentID, ServiceID: b.ServiceID, Period: b.Period,
		SupplierINN: b.Supplier.INN, SupplierKPP: b.Supplier.KPP, SupplierName: b.Supplier.Name})
}

// ChargeDeclined changes nothing: the bill stays paying while dunning
// retries it.
func (o Outcomes) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error { return nil }

// ChargeFailed marks the charge's bill failed: a payment-method change
// retries it while it may still be paid.
func (o Outcomes) ChargeFailed(ctx context.Context, tx pgx.Tx, c charges.Charge) (*time.Time, error) {
	return nil, o.Enrollments.ChargeOutcome(ctx, tx, c.ID, false, 0)
}

// ConfirmationRequired marks the charge's bill awaiting confirmation: its
// new attempt costs more than the customer allowed.
func (o Outcomes) ConfirmationRequired(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	return o.Enrollments.AwaitConfirmation(ctx, tx, c.ID)
}

// ChargeExpired marks the charge's bill expired: its last moment to start
// an attempt passed.
func (o Outcomes) ChargeExpired(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	return o.Enrollments.ChargeExpired(ctx, tx, c.ID)
}

// PaidOutside records on the charge's bill what was found paid outside
// rebill: paid elsewhere when that covers its price.
func (o Outcomes) PaidOutside(ctx context.Context, tx pgx.Tx, c charges.Charge, inFull bool) error {
	return o.Enrollments.PaidOutside(ctx, tx, c.ID, c.PaidOutside, inFull)
}
