package enrollments

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pg"
)

// PaidOutside records what the check before a hold of the charge
// chargeID found paid against its bill outside rebill (paid): in full,
// the bill is paid elsewhere (event bill.paid_elsewhere); in part, the
// amount due is the rest. A bill that left the statuses of one being paid
// is left as it is.
func (st *Store) PaidOutside(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, paid int64, inFull bool) error {
	b, err := st.BillByCharge(ctx, tx, chargeID)
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	being := []BillStatus{BillPaying, BillFailed, BillAwaitingConfirmation}
	if inFull {
		_, err = st.moveBill(ctx, tx, b.ID, being, BillPaidElsewhere, BillEventPaidElsewhere, `paid_outside = $1`, paid)
	} else {
		_, err = st.writeBill(ctx, tx, b.ID, BillMachine.Within(being...), "", `paid_outside = $1`, paid)
	}
	if errors.Is(err, ErrBillNotFound) {
		return nil
	}
	return err
}

// SourcePaid records what the bill's source reports paid against it
// outside rebill (paid, more than recorded so far), for a bill whose own
// charge holds no money (the caller checked): in full at its price now,
// the bill is paid elsewhere (event bill.paid_elsewhere) and the caller
// voids its waiting charge; in part, the amount due is the rest, and the
// caller reprices that charge. Returns the bill and whether it is paid in
// full. The caller locked the enrollment.
func (st *Store) SourcePaid(ctx context.Context, tx pgx.Tx, b Bill, paid int64) (Bill, bool, error) {
	open := []BillStatus{BillPending, BillAwaitingConfirmation, BillAwaitingRegistry, BillScheduled, BillPaying, BillFailed, BillDuplicate}
	now := st.clock.Now()
	at := now
	if b.PayAt.After(at) {
		at = b.PayAt
	}
	if AmountDue(b.Amount, b.DiscountedAmount, b.DiscountEnds(), at) <= paid {
		b, err := st.moveBill(ctx, tx, b.ID, []BillStatus{b.Status}, BillPaidElsewhere, BillEventPaidElsewhere, `paid_outside = $1`, paid)
		return b, err == nil, err
	}
	b, err := st.writeBill(ctx, tx, b.ID, BillMachine.Within(open...), "", `paid_outside = GREATEST(paid_outside, $1)`, paid)
	return b, false, err
}

// SourceReported records what a fine's source reports paid against it
// (paid) on b, while b is open: its charge, or the one a later scan
// creates, takes it (charges.Store.SourceReported). The amount due does
// not change: only the registry's word counts. Returns the bill, and
// ErrBillNotFound when it is no longer open. The caller locked the
// enrollment.
func (st *Store) SourceReported(ctx context.Context, tx pgx.Tx, b Bill, paid int64) (Bill, error) {
	open := []BillStatus{BillPending, BillAwaitingConfirmation, BillAwaitingRegistry, BillScheduled, BillPaying, BillFailed, BillDuplicate}
	return scanBill(tx.QueryRow(ctx, `UPDATE bills SET source_paid = $2 WHERE id = $1 AND status = ANY($3) RETURNING `+billColumns,
		b.ID, paid, texts(open...)))
}

// CopiesPaidElsewhere marks the copies of identities (a bill's Identity
// and DocumentIdentity) that never had a charge (duplicates) paid
// elsewhere, as paid, when the copy that was being paid was found paid
// outside rebill: it is one bill.
func (st *Store) CopiesPaidElsewhere(ctx context.Context, tx pgx.Tx, identities []string, paid int64) error {
	copies, err := collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills
		WHERE (identity = ANY($1) OR document_identity = ANY($1)) AND status = $2
		AND charge_id IS NULL ORDER BY id`, identities, string(BillDuplicate)))
	if err != nil {
		return err
	}
	for _, c := range copies {
		if _, err := st.moveBill(ctx, tx, c.ID, []BillStatus{BillDuplicate}, BillPaidElsewhere, BillEventPaidElsewhere,
			`paid_outside = $1, paid_by_enrollment_id = NULL`, paid); err != nil && !errors.Is(err, ErrBillNotFound) {
			return err
		}
	}
	return nil
}

// CopyCharges returns the charges of every copy of the bill with
// identities (its Identity and DocumentIdentity), across enrollments: what
// rebill itself may have paid of it (charges.OwnPayments).
func (st *Store) CopyCharges(ctx context.Context, db pg.DBTX, identities []string) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT charge_id FROM bills WHERE identity = ANY($1) AND charge_id IS NOT NULL
		UNION SELECT charge_id FROM bills WHERE document_identity = ANY($1) AND charge_id IS NOT NULL`, identities)
	if err != nil {
		return nil, fmt.Errorf("charges of a bill's copies: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("charges of a bill's copies: %w", err)
	}
	return ids, nil
}
