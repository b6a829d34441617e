package enrollments

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// AwaitRegistry keeps a scheduled fine, which no payment registry is
// configured to post to, from being charged until one is.
func (st *Store) AwaitRegistry(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Bill, error) {
	return st.moveBill(ctx, tx, id, []BillStatus{BillScheduled}, BillAwaitingRegistry, BillEventAwaitingRegistry, "")
}

// RegistryReady schedules up to limit fines that awaited a payment
// registry (kept pending while their enrollment is paused), now that one
// is configured, skipping bills another transaction holds. Returns how
// many.
func (st *Store) RegistryReady(ctx context.Context, tx pgx.Tx, limit int) (int, error) {
	rows, err := tx.Query(ctx, `SELECT b.id, e.status FROM bills b JOIN enrollments e ON e.id = b.enrollment_id
		WHERE b.status = $1 ORDER BY b.id LIMIT $2 FOR UPDATE OF b SKIP LOCKED`, string(BillAwaitingRegistry), limit)
	if err != nil {
		return 0, fmt.Errorf("bills that awaited a registry: %w", err)
	}
	type waiting struct {
		ID     uuid.UUID
		Status Status
	}
	ready, err := pgx.CollectRows(rows, pgx.RowToStructByPos[waiting])
	if err != nil {
		return 0, fmt.Errorf("bills that awaited a registry: %w", err)
	}
	for _, w := range ready {
		to := BillScheduled
		if w.Status == Paused {
			to = BillPending
		}
		if _, err := st.moveBill(ctx, tx, w.ID, []BillStatus{BillAwaitingRegistry}, to, "", ""); err != nil {
			return 0, fmt.Errorf("schedule a bill that awaited a registry: %w", err)
		}
	}
	return len(ready), nil
}

// Paused keeps the enrollment's scheduled bills pending. The caller
// locked the enrollment.
func (st *Store) Paused(ctx context.Context, tx pgx.Tx, enrollmentID uuid.UUID) error {
	scheduled, err := collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills WHERE enrollment_id = $1 AND status = $2
		ORDER BY id`, enrollmentID, string(BillScheduled)))
	if err != nil {
		return err
	}
	for _, b := range scheduled {
		if _, err := st.moveBill(ctx, tx, b.ID, []BillStatus{BillScheduled}, BillPending, "", ""); err != nil {
			return fmt.Errorf("keep bill %s pending: %w", b.ID, err)
		}
	}
	return nil
}

// Resumed schedules the enrollment's pending bills again (those above
// max_amount and not confirmed await confirmation): a pay_at that passed
// meanwhile is due at once.
func (st *Store) Resumed(ctx context.Context, tx pgx.Tx, e Enrollment) error {
	pending, err := collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills WHERE enrollment_id = $1 AND status = $2
		ORDER BY id`, e.ID, string(BillPending)))
	if err != nil {
		return err
	}
	now := st.clock.Now()
	for _, b := range pending {
		to, event := BillScheduled, ""
		at := now
		if b.PayAt.After(at) {
			at = b.PayAt
		}
		if b.overCap(e, at) {
			to, event = BillAwaitingConfirmation, BillEventAwaitingConfirmation
		}
		if _, err := st.moveBill(ctx, tx, b.ID, []BillStatus{BillPending}, to, event, ""); err != nil {
			return err
		}
	}
	return nil
}

// Payable returns the enrollment's bills being paid or failed that may
// still be paid at now: a payment-method change retries their charges
// that wait (declined, failed).
func (st *Store) Payable(ctx context.Context, tx pgx.Tx, enrollmentID uuid.UUID, now time.Time) ([]Bill, error) {
	return collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills
		WHERE enrollment_id = $1 AND status = ANY($2) AND expires_at > $3 AND charge_id IS NOT NULL ORDER BY id`,
		enrollmentID, texts(BillPaying, BillFailed), now))
}

// ExpireDue marks up to limit bills whose last payable day is over, and
// that are not being paid, expired, and returns them: the caller voids
// the charge of one that has one waiting (a confirmation never given).
func (st *Store) ExpireDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Bill, error) {
	due, err := collectBills(tx.Query(ctx, `SELECT `+billColumns+` FROM bills
		WHERE status = ANY($1) AND expires_at <= $2 ORDER BY expires_at, id LIMIT $3 FOR UPDATE SKIP LOCKED`,
		texts(BillPending, BillAwaitingConfirmation, BillAwaitingRegistry, BillScheduled, BillFailed), now, limit))
	if err != nil {
		return nil, err
	}
	for i, b := range due {
		if due[i], err = st.moveBill(ctx, tx, b.ID, []BillStatus{b.Status}, BillExpired, BillEventExpired, ""); err != nil {
			return nil, err
		}
	}
	return due, nil
}
