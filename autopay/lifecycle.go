package autopay

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
)

// Pause keeps the enrollment's bills pending until resume; charges
// already under way finish. Pausing a paused enrollment changes nothing.
func (a *Autopay) Pause(ctx context.Context, tx pgx.Tx, id uuid.UUID) (enrollments.Enrollment, error) {
	e, changed, err := a.Enrollments.SetStatus(ctx, tx, id, enrollments.Paused, enrollments.EventPaused)
	if err != nil || !changed {
		return e, err
	}
	return e, a.Enrollments.Paused(ctx, tx, id)
}

// Resume schedules the pending bills again, charging at once those whose
// pay_at passed meanwhile. Resuming an active enrollment changes nothing.
func (a *Autopay) Resume(ctx context.Context, tx pgx.Tx, id uuid.UUID) (enrollments.Enrollment, error) {
	e, changed, err := a.Enrollments.SetStatus(ctx, tx, id, enrollments.Active, enrollments.EventResumed)
	if err != nil || !changed {
		return e, err
	}
	if err := a.Enrollments.Resumed(ctx, tx, e); err != nil {
		return e, err
	}
	return e, a.chargeDueOf(ctx, tx, e)
}

// chargeDueOf charges the enrollment's due scheduled bills.
func (a *Autopay) chargeDueOf(ctx context.Context, tx pgx.Tx, e enrollments.Enrollment) error {
	bills, err := a.Enrollments.ListBills(ctx, tx, e.ID, uuid.Nil, 1000)
	if err != nil {
		return err
	}
	byIdentity(bills)
	for _, b := range bills {
		if _, err := a.ChargeIfDue(ctx, tx, e, b); err != nil {
			return err
		}
	}
	return nil
}

// Cancel ends the enrollment: nothing more is charged; charges not yet
// holding money are voided at once and holds are released by void jobs
// enqueued in tx. Cancelling twice changes nothing.
func (a *Autopay) Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID) (enrollments.Enrollment, error) {
	e, changed, err := a.Enrollments.SetStatus(ctx, tx, id, enrollments.Cancelled, enrollments.EventCancelled)
	if err != nil || !changed {
		return e, err
	}
	return e, a.Charges.StopBills(ctx, tx, id, uuid.Nil, "enrollment_cancelled", a.Clock.Now())
}

// ChangePaymentMethod gives the enrollment a new card (or the same: the
// customer's "try again"); its bills that wait on a declined or failed
// charge and may still be paid are retried at once with it. changed
// reports whether the card differs from the one it had.
func (a *Autopay) ChangePaymentMethod(ctx context.Context, tx pgx.Tx, id uuid.UUID, pm rebilltype.PaymentMethod) (enrollments.Enrollment, bool, error) {
	e, changed, err := a.Enrollments.ChangePaymentMethod(ctx, tx, id, pm)
	if err != nil {
		return e, changed, err
	}
	now := a.Clock.Now()
	payable, err := a.Enrollments.Payable(ctx, tx, id, now)
	if err != nil {
		return e, changed, err
	}
	chargeIDs := make([]uuid.UUID, 0, len(payable))
	for _, b := range payable {
		chargeIDs = append(chargeIDs, *b.ChargeID)
	}
	retried, err := a.Charges.EnrollmentPaymentMethodChanged(ctx, tx, id, chargeIDs, pm.Gateway, pm.Token, now)
	if err != nil {
		return e, changed, err
	}
	for _, c := range retried {
		b, err := a.Enrollments.BillByCharge(ctx, tx, c.ID)
		if err != nil {
			return e, changed, err
		}
		if b.Status == enrollments.BillFailed {
			if _, err := a.Enrollments.Charging(ctx, tx, b.ID, c.ID); err != nil {
				return e, changed, err
			}
		}
	}
	return e, changed, nil
}

// Confirm records the customer's consent to a bill above max_amount, up
// to its amount due now, and charges it if due; a charge whose new attempt
// awaited the consent starts it.
func (a *Autopay) Confirm(ctx context.Context, tx pgx.Tx, id uuid.UUID, billID string) (enrollments.Bill, error) {
	e, err := a.Enrollments.GetForUpdate(ctx, tx, id)
	if err != nil {
		return enrollments.Bill{}, err
	}
	b, err := a.Enrollments.Confirm(ctx, tx, e, billID)
	if err != nil {
		return b, err
	}
	if b.Status == enrollments.BillPaying && b.ChargeID != nil && b.ConfirmedAmount != nil {
		_, err := a.Charges.Confirm(ctx, tx, *b.ChargeID, *b.ConfirmedAmount, a.Clock.Now())
		if errors.Is(err, charges.ErrStale) {
			return b, nil
		}
		return b, err
	}
	return a.ChargeIfDue(ctx, tx, e, b)
}

// Withdraw marks a bill the issuer annulled: never charged. A charge not
// yet holding money is voided at once; a hold is released by a void job
// enqueued in tx. A bill whose capture has begun or succeeded cannot be
// withdrawn (*fsm.TransitionError).
func (a *Autopay) Withdraw(ctx context.Context, tx pgx.Tx, id uuid.UUID, billID string) (enrollments.Bill, error) {
	e, err := a.Enrollments.GetForUpdate(ctx, tx, id)
	if err != nil {
		return enrollments.Bill{}, err
	}
	b, err := a.Enrollments.GetBill(ctx, tx, id, billID)
	if err != nil || b.Status == enrollments.BillWithdrawn {
		return b, err
	}
	if b.ChargeID != nil {
		// Stop the charge first: its flag and a capture's start take the
		// same row lock, so after it either no capture will start or one
		// has, and then the bill cannot be withdrawn (nor its hold's void
		// enqueued: the transaction fails).
		if err := a.Charges.StopBills(ctx, tx, id, *b.ChargeID, "bill_withdrawn", a.Clock.Now()); err != nil {
			return b, err
		}
		c, err := charges.Get(ctx, tx, *b.ChargeID)
		if err != nil {
			return b, err
		}
		if c.Status == charges.Capturing || c.Status == charges.Succeeded {
			return b, enrollments.BillMachine.Refuse(b.Status, enrollments.BillWithdrawn,
				"its payment is being captured or was captured")
		}
	}
	b, _, err = a.Enrollments.Withdraw(ctx, tx, e, billID)
	return b, err
}

// Retried records that a person started a new attempt of a bill's charge:
// a failed bill is being paid again.
func (a *Autopay) Retried(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	b, err := a.Enrollments.BillByCharge(ctx, tx, c.ID)
	if err != nil || b.Status != enrollments.BillFailed {
		return err
	}
	_, err = a.Enrollments.Charging(ctx, tx, b.ID, c.ID)
	return err
}
