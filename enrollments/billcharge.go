package enrollments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Confirm records the customer's consent to pay a bill above max_amount,
// up to its amount due now (or at pay_at, if later): ConfirmedAmount. A
// bill without a charge is scheduled (kept pending while the enrollment is
// paused); one whose charge's new attempt awaits the confirmation is
// paying again, and the caller confirms the charge (charges.Confirm) and
// starts it. A bill whose confirmation already covers its amount due, or
// not awaiting confirmation but on its way, is returned unchanged; a
// withdrawn or expired one is a *fsm.TransitionError. The caller locked the
// enrollment.
func (st *Store) Confirm(ctx context.Context, tx pgx.Tx, e Enrollment, billID string) (Bill, error) {
	b, err := st.GetBill(ctx, tx, e.ID, billID)
	if err != nil {
		return Bill{}, err
	}
	now := st.clock.Now()
	at := now
	if b.PayAt.After(at) {
		at = b.PayAt
	}
	amount := b.AmountDue(at)
	const confirmed = `confirmed_at = $1, confirmed_amount = $2`
	switch b.Status {
	case BillWithdrawn, BillExpired:
		return b, BillMachine.Refuse(b.Status, BillScheduled, "")
	case BillAwaitingConfirmation:
		to := BillScheduled
		switch {
		case b.ChargeID != nil && e.Status == Cancelled:
			return b, BillMachine.Refuse(b.Status, BillPaying, "the enrollment is cancelled")
		case b.ChargeID != nil:
			to = BillPaying
		case e.Status == Paused:
			to = BillPending
		}
		return st.moveBill(ctx, tx, b.ID, []BillStatus{BillAwaitingConfirmation}, to, "", confirmed, now, amount)
	case BillPending:
		if !b.overCap(e, at) {
			return b, nil
		}
		// Recorded, not a move: the bill stays pending until resume.
		return st.writeBill(ctx, tx, b.ID, BillMachine.Within(BillPending), "", confirmed, now, amount)
	}
	return b, nil
}

// AwaitConfirmation records that the new attempt of the charge chargeID
// would cost more than the customer allowed: its bill, being paid, awaits
// their confirmation (event bill.awaiting_confirmation). A bill in
// another status is left as it is.
func (st *Store) AwaitConfirmation(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID) error {
	b, err := st.BillByCharge(ctx, tx, chargeID)
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = st.moveBill(ctx, tx, b.ID, []BillStatus{BillPaying, BillFailed}, BillAwaitingConfirmation,
		BillEventAwaitingConfirmation, "")
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	return err
}

// ChargeExpired records that the charge chargeID was voided because its
// bill's last moment to start an attempt passed: the bill is expired
// (event bill.expired) unless it is already settled otherwise.
func (st *Store) ChargeExpired(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID) error {
	b, err := st.BillByCharge(ctx, tx, chargeID)
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = st.moveBill(ctx, tx, b.ID, []BillStatus{BillPaying, BillFailed, BillAwaitingConfirmation}, BillExpired,
		BillEventExpired, "")
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	return err
}

// Withdraw marks a bill the issuer annulled: it is never charged. The
// caller voids its charge. Withdrawing twice returns it unchanged; a paid
// bill is a *fsm.TransitionError. The caller locked the enrollment.
func (st *Store) Withdraw(ctx context.Context, tx pgx.Tx, e Enrollment, billID string) (Bill, bool, error) {
	b, err := st.GetBill(ctx, tx, e.ID, billID)
	if err != nil {
		return Bill{}, false, err
	}
	switch b.Status {
	case BillWithdrawn:
		return b, false, nil
	case BillPaid:
		return b, false, BillMachine.Refuse(b.Status, BillWithdrawn, "the bill is paid")
	}
	b, err = st.moveBill(ctx, tx, b.ID, []BillStatus{b.Status}, BillWithdrawn, BillEventWithdrawn, "")
	return b, err == nil, err
}

// LockDue claims up to limit scheduled bills whose pay_at has come, of
// active enrollments, with their enrollments, skipping rows another scan
// or request holds: each is charged by whoever holds it. Locks the
// enrollment rows too, so that a card change or a pause serialises with
// the charge being created.
func (st *Store) LockDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Bill, map[uuid.UUID]Enrollment, error) {
	rows, err := tx.Query(ctx, `SELECT b.id, e.id FROM bills b JOIN enrollments e ON e.id = b.enrollment_id
		WHERE b.status = $1 AND b.pay_at <= $2 AND e.status = $3
		ORDER BY b.pay_at, b.id LIMIT $4 FOR UPDATE OF e, b SKIP LOCKED`, string(BillScheduled), now, string(Active), limit)
	if err != nil {
		return nil, nil, fmt.Errorf("lock due bills: %w", err)
	}
	var billIDs, enrollmentIDs []uuid.UUID
	var billID, enrollmentID uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&billID, &enrollmentID}, func() error {
		billIDs, enrollmentIDs = append(billIDs, billID), append(enrollmentIDs, enrollmentID)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("lock due bills: %w", err)
	}
	if len(billIDs) == 0 {
		return nil, nil, nil
	}
	enrolled, err := collect(tx.Query(ctx, `SELECT `+columns+` FROM enrollments WHERE id = ANY($1)`, enrollmentIDs))
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[uuid.UUID]Enrollment, len(enrolled))
	for _, e := range enrolled {
		byID[e.ID] = e
	}
	bills, err := collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills WHERE id = ANY($1) ORDER BY pay_at, id`, billIDs))
	return bills, byID, err
}

// Charging records that the bill's charge exists: scheduled -> paying.
func (st *Store) Charging(ctx context.Context, tx pgx.Tx, id, chargeID uuid.UUID) (Bill, error) {
	return st.moveBill(ctx, tx, id, []BillStatus{BillScheduled, BillFailed}, BillPaying, "", `charge_id = $1`, chargeID)
}

// ChargeOutcome moves the bill of charge chargeID to paid (having cost
// paidAmount) or failed as its charge settled (a bill withdrawn or expired
// meanwhile stays so). A failed bill that a person then resolved as paid
// becomes paid.
func (st *Store) ChargeOutcome(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, paid bool, paidAmount int64) error {
	b, err := st.BillByCharge(ctx, tx, chargeID)
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if paid {
		_, err = st.moveBill(ctx, tx, b.ID, []BillStatus{BillPaying, BillFailed, BillExpired, BillDuplicate}, BillPaid, BillEventPaid,
			`paid_at = $1, paid_amount = $2`, st.clock.Now(), paidAmount)
	} else {
		_, err = st.moveBill(ctx, tx, b.ID, []BillStatus{BillPaying}, BillFailed, BillEventFailed, "")
	}
	if errors.Is(err, ErrBillNotFound) {
		return nil // the bill left those statuses: nothing to record
	}
	return err
}
