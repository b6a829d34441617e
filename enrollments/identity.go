package enrollments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/pg"
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

// Released is a bill identity whose charge may let go of it
// (charges.Releasable lists them).
type Released struct {
	ChargeID     uuid.UUID
	EnrollmentID uuid.UUID
	Identity     string
	// DocumentIdentity is the charge's second identity (DocumentIdentity),
	// "" for none.
	DocumentIdentity string
}

// identities are the identities r's charge holds.
func (r Released) identities() []string {
	if r.DocumentIdentity == "" {
		return []string{r.Identity}
	}
	return []string{r.Identity, r.DocumentIdentity}
}

// CopiesWaiting tells which of identities (a bill's Identity or its
// DocumentIdentity) have a copy of their bill waiting to be paid: a
// duplicate that never had a charge, of an enrollment not cancelled. A
// failed charge lets go of its bill's identity only to such a copy
// (charges.Releasable asks it): otherwise a fine another enrollment would
// pay stays unpaid behind a card that cannot pay it.
func (st *Store) CopiesWaiting(ctx context.Context, db pg.DBTX, identities []string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT o.identity FROM bills o JOIN enrollments oe ON oe.id = o.enrollment_id
		WHERE o.identity = ANY($1) AND o.status = $2 AND o.charge_id IS NULL AND oe.status <> $3
		UNION SELECT o.document_identity FROM bills o JOIN enrollments oe ON oe.id = o.enrollment_id
		WHERE o.document_identity = ANY($1) AND o.status = $2 AND o.charge_id IS NULL AND oe.status <> $3`,
		identities, string(BillDuplicate), string(Cancelled))
	if err != nil {
		return nil, fmt.Errorf("copies of bills waiting to pay: %w", err)
	}
	waiting, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("copies of bills waiting to pay: %w", err)
	}
	out := make(map[string]bool, len(waiting))
	for _, id := range waiting {
		out[id] = true
	}
	return out, nil
}

// LetGo lets a charge go of the bill identity it holds, in tx, if it
// still may, and reports whether it did: the charges' owner's verb
// (charges.Store.ReleaseIdentity), handed in by the caller. copyWaiting
// says whether a copy of the bill waits to pay (CopiesWaiting).
type LetGo func(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, copyWaiting bool, now time.Time) (bool, error)

// ReleaseIdentity lets the charge r.ChargeID go of its bill's identity,
// if it still may (letGo decides, told whether a copy waits to pay, and
// records it), in tx: its copy becomes a duplicate for good (its charge
// no longer holds the identity, so neither a card change nor a retry may
// charge it), and the oldest copy that never had a charge and may still
// be paid, of an enrollment not cancelled, takes its place: scheduled
// (pending while its enrollment is paused, awaiting confirmation above
// its max_amount). Enrollment rows are locked first, in id order, as
// every change of a bill does. Returns the promoted copy (nil for none)
// and whether the identity was released.
func (st *Store) ReleaseIdentity(ctx context.Context, tx pgx.Tx, r Released, letGo LetGo, now time.Time) (*Bill, bool, error) {
	next, err := st.nextCopy(ctx, tx, r.identities(), now)
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
	copies, err := st.CopiesWaiting(ctx, tx, r.identities())
	if err != nil {
		return nil, false, err
	}
	released, err := letGo(ctx, tx, r.ChargeID, copies[r.Identity] || copies[r.DocumentIdentity], now)
	if err != nil || !released {
		return nil, false, err
	}
	bill, err := st.BillByCharge(ctx, tx, r.ChargeID)
	switch {
	case errors.Is(err, ErrBillNotFound):
	case err != nil:
		return nil, false, err
	case bill.Status == BillPaidElsewhere:
		// The bill was paid outside rebill: so were its other copies.
		return nil, true, st.CopiesPaidElsewhere(ctx, tx, bill.Identities(), bill.PaidOutside)
	default:
		_, err = st.moveBill(ctx, tx, bill.ID, []BillStatus{BillScheduled, BillPaying, BillFailed}, BillDuplicate,
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

// nextCopy is the oldest copy, of one of identities (a bill's Identity
// or DocumentIdentity), that never had a charge and may still be paid at
// now, or nil.
func (st *Store) nextCopy(ctx context.Context, tx pgx.Tx, identities []string, now time.Time) (*Bill, error) {
	b, err := scanBill(tx.QueryRow(ctx, `SELECT `+billColumns+` FROM bills b
		WHERE (identity = ANY($1) OR document_identity = ANY($1)) AND status = $2 AND charge_id IS NULL AND expires_at > $3
		  AND EXISTS (SELECT 1 FROM enrollments e WHERE e.id = b.enrollment_id AND e.status <> $4)
		ORDER BY received_at, id LIMIT 1`, identities, string(BillDuplicate), now, string(Cancelled)))
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
