package enrollments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/gisgmp"
	"github.com/rebill/rebill/internal/pg"
)

// ErrEnrollmentExists: the customer already has an enrollment, not
// cancelled, for the same account (see ExistsError).
var ErrEnrollmentExists = fault.New(fault.Conflict, "the customer already has this enrollment")

// ExistsError names the enrollment that a new one would repeat.
type ExistsError struct{ ID uuid.UUID }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%s: enrollment %s", ErrEnrollmentExists, e.ID)
}

// Unwrap makes errors.Is(err, ErrEnrollmentExists) hold.
func (e *ExistsError) Unwrap() error { return ErrEnrollmentExists }

// Existing returns a *ExistsError when n's customer already has an
// enrollment, not cancelled, that n repeats: of the same kind and the
// same ELS, or sharing an STS or a driving licence. n is canonical (see
// New.Canonical). It takes a lock on the customer's enrollments until tx
// ends, so that two creations racing under two idempotency keys
// serialise and the second sees the first.
func (st *Store) Existing(ctx context.Context, tx pgx.Tx, n New) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('enrollments:' || $1, 0))`, n.CustomerID); err != nil {
		return fmt.Errorf("lock the customer's enrollments: %w", err)
	}
	var id uuid.UUID
	err := tx.QueryRow(ctx, `SELECT id FROM enrollments
		WHERE customer_id = $1 AND kind = $2 AND status <> $6 AND (els = $3 OR sts = $4 OR driver_license = $5)
		ORDER BY id LIMIT 1`, n.CustomerID, n.Kind, nullable(n.AccountRef.ELS), nullable(n.AccountRef.STS),
		nullable(n.AccountRef.DriverLicense), string(Cancelled)).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look up the customer's enrollments: %w", err)
	}
	return &ExistsError{ID: id}
}

// Duplicate records that the scheduled bill b lost its identity to the
// charge of enrollment payer's copy: it is not charged here. Returns
// ErrBillNotFound when the bill left scheduled meanwhile.
func (st *Store) Duplicate(ctx context.Context, tx pgx.Tx, b Bill, payer uuid.UUID) (Bill, error) {
	return st.moveBill(ctx, tx, b.ID, []BillStatus{BillScheduled}, BillDuplicate, BillEventDuplicate,
		`paid_by_enrollment_id = $1`, payer)
}

// Released is a bill identity whose charge let go of it.
type Released struct {
	ChargeID     uuid.UUID
	EnrollmentID uuid.UUID
	Identity     string
}

// releasableSQL holds for a charge c holding a bill identity whose money
// provably never moved, and no posting of it, nor of its UIN, stands
// accepted (or may be) at the state payment registry. Its money never
// moved when it is voided (final), or when it failed either after a
// look-up at the gateway found no capture and released its hold, or by
// its gateway's declines alone (no attempt ever held money, and no person
// judged it, whose verdict may leave an outcome unknown until its hold
// check ran). A failed copy may still be paid by its own enrollment's
// next card, so it lets go only to a copy waiting to pay: otherwise a
// fine another enrollment would pay stays unpaid behind a card that
// cannot pay it. Its first terms are the predicate of the partial index
// charges_identity_releasable_idx (off_path_status is status while it is
// voided or failed), so the scan reads only the charges that index holds.
const releasableSQL = `c.identity_held AND c.off_path_status IN ('` + string(charges.Voided) + `', '` + string(charges.Failed) + `')
	AND (c.status = '` + string(charges.Voided) + `' OR (c.status = '` + string(charges.Failed) +
	`' AND (c.hold_released_at IS NOT NULL OR (c.authorized_at IS NULL AND c.review_reason IS NULL))
		AND EXISTS (SELECT 1 FROM bills o JOIN enrollments oe ON oe.id = o.enrollment_id
			WHERE o.identity = c.bill_identity AND o.status = '` + string(BillDuplicate) + `' AND o.charge_id IS NULL
				AND oe.status <> '` + string(Cancelled) + `')))
	AND NOT EXISTS (SELECT 1 FROM registry_postings p
		WHERE (p.charge_id = c.id OR p.uin = c.registry_uin)
			AND p.status IN ('` + string(gisgmp.StatusPosting) + `', '` + string(gisgmp.StatusAccepted) + `', '` +
	string(gisgmp.StatusAbandoned) + `'))`

// Releasable lists up to limit identities whose holding charge may let go
// of them (see ReleaseIdentity).
func (st *Store) Releasable(ctx context.Context, db pg.DBTX, limit int) ([]Released, error) {
	rows, err := db.Query(ctx, `SELECT c.id, c.enrollment_id, c.bill_identity FROM charges c
		WHERE `+releasableSQL+` ORDER BY c.bill_identity LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("releasable bill identities: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Released])
}

// ReleaseIdentity lets the charge r.ChargeID go of its bill's identity,
// if it still may (see releasableSQL), in tx: its copy becomes a duplicate
// for good (its charge no longer holds the identity, so neither a card
// change nor a retry may charge it), and the oldest copy that never had a
// charge and may still be paid, of an enrollment not cancelled, takes
// its place: scheduled (pending while its enrollment is paused, awaiting
// confirmation above its max_amount). Enrollment rows are locked first,
// in id order, as every change of a bill does. Returns the promoted copy
// (nil for none) and whether the identity was released.
func (st *Store) ReleaseIdentity(ctx context.Context, tx pgx.Tx, r Released, now time.Time) (*Bill, bool, error) {
	next, err := st.nextCopy(ctx, tx, r.Identity, now)
	if err != nil {
		return nil, false, err
	}
	locked := map[uuid.UUID]Enrollment{}
	ids := []uuid.UUID{r.EnrollmentID}
	if next != nil && next.EnrollmentID != r.EnrollmentID {
		ids = append(ids, next.EnrollmentID)
		if ids[1].String() < ids[0].String() {
			ids[0], ids[1] = ids[1], ids[0]
		}
	}
	for _, id := range ids {
		e, err := st.GetForUpdate(ctx, tx, id)
		if err != nil {
			return nil, false, err
		}
		locked[id] = e
	}
	tag, err := tx.Exec(ctx, `UPDATE charges c SET identity_held = false, identity_released_at = $2
		WHERE c.id = $1 AND `+releasableSQL, r.ChargeID, now)
	if err != nil {
		return nil, false, fmt.Errorf("release bill identity: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, false, nil
	}
	released, err := st.BillByCharge(ctx, tx, r.ChargeID)
	switch {
	case errors.Is(err, ErrBillNotFound):
	case err != nil:
		return nil, false, err
	case released.Status == BillPaidElsewhere:
		// The bill was paid outside rebill: so were its other copies.
		return nil, true, st.CopiesPaidElsewhere(ctx, tx, released.Identity, released.PaidOutside)
	default:
		_, err = st.moveBill(ctx, tx, released.ID, []BillStatus{BillScheduled, BillPaying, BillFailed}, BillDuplicate,
			BillEventDuplicate, `paid_by_enrollment_id = NULL`)
		if err != nil && !errors.Is(err, ErrBillNotFound) {
			return nil, false, err
		}
	}
	if next == nil {
		return nil, true, nil
	}
	e := locked[next.EnrollmentID]
	to, event := BillScheduled, ""
	switch {
	case e.Status == Cancelled:
		return nil, true, nil
	case e.Status == Paused:
		to = BillPending
	case next.ConfirmedAt == nil && next.AmountDue(maxTime(next.PayAt, now)) > e.MaxAmount:
		to, event = BillAwaitingConfirmation, BillEventAwaitingConfirmation
	}
	promoted, err := st.moveBill(ctx, tx, next.ID, []BillStatus{BillDuplicate}, to, event, `paid_by_enrollment_id = NULL`)
	if errors.Is(err, ErrBillNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &promoted, true, nil
}

// nextCopy is the oldest copy of identity that never had a charge and may
// still be paid at now, or nil.
func (st *Store) nextCopy(ctx context.Context, tx pgx.Tx, identity string, now time.Time) (*Bill, error) {
	b, err := scanBill(tx.QueryRow(ctx, `SELECT `+billColumns+` FROM bills b
		WHERE identity = $1 AND status = $2 AND charge_id IS NULL AND expires_at > $3
		  AND EXISTS (SELECT 1 FROM enrollments e WHERE e.id = b.enrollment_id AND e.status <> $4)
		ORDER BY received_at, id LIMIT 1`, identity, string(BillDuplicate), now, string(Cancelled)))
	if errors.Is(err, ErrBillNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &b, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// PaidTwice is a bill identity that more than one charge captured: an
// overpayment to report (the audit lists them). Charges are oldest first.
type PaidTwice struct {
	Identity  string
	ChargeIDs []uuid.UUID
}

// ListPaidTwice returns every bill identity captured by more than one
// charge (at most limit), ordered by identity. Since charges claim
// identities, only pairs paid before that rule existed can be listed.
func ListPaidTwice(ctx context.Context, db pg.DBTX, limit int) ([]PaidTwice, error) {
	rows, err := db.Query(ctx, `SELECT bill_identity, array_agg(id ORDER BY created_at, id) FROM charges
		WHERE bill_identity IS NOT NULL AND status = '`+string(charges.Succeeded)+`'
		GROUP BY bill_identity HAVING count(*) > 1 ORDER BY bill_identity LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("bill identities paid twice: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PaidTwice])
}

// Repeated is a customer's enrollments, not cancelled, of one account:
// enrollments made before repeats were refused, or under two spellings of
// one document that the migration to one spelling made equal. Support
// cancels all but one (bills reaching each are paid once meanwhile).
type Repeated struct {
	CustomerID string
	// Field names the identifier they share: els, sts or driver_license.
	Field         string
	EnrollmentIDs []uuid.UUID
}

// ListRepeated returns every customer's repeated enrollments (at most
// limit groups), ordered by customer, oldest enrollment first.
func ListRepeated(ctx context.Context, db pg.DBTX, limit int) ([]Repeated, error) {
	rows, err := db.Query(ctx, `SELECT customer_id, field, ids FROM (
			SELECT customer_id, 'els' AS field, array_agg(id ORDER BY created_at, id) AS ids FROM enrollments
			WHERE els IS NOT NULL AND status <> $1 GROUP BY customer_id, kind, els HAVING count(*) > 1
			UNION ALL
			SELECT customer_id, 'sts', array_agg(id ORDER BY created_at, id) FROM enrollments
			WHERE sts IS NOT NULL AND status <> $1 GROUP BY customer_id, kind, sts HAVING count(*) > 1
			UNION ALL
			SELECT customer_id, 'driver_license', array_agg(id ORDER BY created_at, id) FROM enrollments
			WHERE driver_license IS NOT NULL AND status <> $1 GROUP BY customer_id, kind, driver_license HAVING count(*) > 1
		) r ORDER BY customer_id, field, ids[1] LIMIT $2`, string(Cancelled), limit)
	if err != nil {
		return nil, fmt.Errorf("repeated enrollments: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Repeated])
}
