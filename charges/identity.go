package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/fsm"
)

// A bill charge claims its bill's identity (identity_held, unique among
// the charges that hold one, see CreateForBill), so that copies of one
// bill reaching several enrollments are paid once. The charge lets go of
// it only once its money provably never moved and the state payment
// registry holds, and may come to hold, no payment of it; the bills'
// owner then promotes the next copy (enrollments.Store.ReleaseIdentity,
// which calls ReleaseIdentity in its transaction).

// releasableSQL holds for a charge c holding a bill identity whose money
// provably never moved, and no posting of it, nor of its UIN, stands
// accepted (or may be) at the registry. Its money never moved when it is
// voided (final), or when it failed either after a look-up at the gateway
// found no capture and released its hold, or by its gateway's declines
// alone (no attempt ever held money, and no person judged it, whose
// verdict may leave an outcome unknown until its hold check ran). A
// failed one lets go only to a copy of its bill waiting to pay (the
// condition copyWaitingSQL stands for): otherwise a fine another
// enrollment would pay stays unpaid behind a card that cannot pay it.
// Its first terms are the predicate of the partial index
// charges_identity_releasable_idx (off_path_status is status while it is
// voided or failed, and the planner matches literals, not parameters), so
// the scan reads only the charges that index holds.
func releasableSQL(copyWaitingSQL string) string {
	return `c.identity_held AND c.off_path_status IN (` + fsm.Quoted(Voided, Failed) + `)
	AND (c.status = ` + fsm.Quoted(Voided) + ` OR (c.status = ` + fsm.Quoted(Failed) + `
		AND (c.hold_released_at IS NOT NULL OR (c.authorized_at IS NULL AND c.review_reason IS NULL))
		AND ` + copyWaitingSQL + `))
	AND NOT EXISTS (SELECT 1 FROM registry_postings p
		WHERE (p.charge_id = c.id OR p.uin = c.registry_uin)
			AND p.status IN (` + fsm.Quoted(PostingPosting, PostingAccepted, PostingAbandoned) + `))`
}

// HeldIdentity is a bill identity whose charge may let go of it.
type HeldIdentity struct {
	ChargeID     uuid.UUID
	EnrollmentID uuid.UUID
	Identity     string
	// DocumentIdentity is the second identity the charge holds with
	// Identity (NewBillCharge.DocumentIdentity), "" for none.
	DocumentIdentity string
}

// CopiesWaiting tells which of identities (bill and document identities)
// have a copy of their bill waiting to be paid by another enrollment: the
// bills' owner answers.
type CopiesWaiting func(ctx context.Context, identities []string) (map[string]bool, error)

// Releasable lists up to limit identities, in identity order, whose
// holding charge may let go of them (see ReleaseIdentity); waiting tells
// which of the failed charges' identities have a copy waiting to pay.
// The held identities are read in pages of limit (an identity is held by
// one charge at most, so the identity is the page's key), each page's
// failed ones asked of waiting, until limit are found or none is left.
func Releasable(ctx context.Context, db DBTX, limit int, waiting CopiesWaiting) ([]HeldIdentity, error) {
	limit = max(limit, 1)
	var out []HeldIdentity
	after := ""
	for len(out) < limit {
		rows, err := db.Query(ctx, `SELECT c.id, c.enrollment_id, c.bill_identity, coalesce(c.document_identity, ''),
				c.status = $3 FROM charges c
			WHERE `+releasableSQL("true")+` AND c.bill_identity > $1 ORDER BY c.bill_identity LIMIT $2`,
			after, limit, Failed)
		if err != nil {
			return nil, fmt.Errorf("releasable bill identities: %w", err)
		}
		type candidate struct {
			HeldIdentity
			failed bool
		}
		page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			err := row.Scan(&c.ChargeID, &c.EnrollmentID, &c.Identity, &c.DocumentIdentity, &c.failed)
			return c, err
		})
		if err != nil {
			return nil, fmt.Errorf("releasable bill identities: %w", err)
		}
		if len(page) == 0 {
			break
		}
		var failed []string
		for _, c := range page {
			if c.failed {
				failed = append(failed, c.Identity)
				if c.DocumentIdentity != "" {
					failed = append(failed, c.DocumentIdentity)
				}
			}
		}
		copies := map[string]bool{}
		if len(failed) > 0 {
			if copies, err = waiting(ctx, failed); err != nil {
				return nil, fmt.Errorf("releasable bill identities: %w", err)
			}
		}
		for _, c := range page {
			if (!c.failed || copies[c.Identity] || copies[c.DocumentIdentity]) && len(out) < limit {
				out = append(out, c.HeldIdentity)
			}
		}
		if len(page) < limit {
			break
		}
		after = page[len(page)-1].Identity
	}
	return out, nil
}

// ReleaseIdentity lets charge chargeID go of its bill's identity, in tx,
// if it still may (see releasableSQL); copyWaiting is the bills' owner's
// answer, in tx, whether a copy of the bill waits to pay. The charge then
// no longer holds it, so neither a card change nor a retry may charge its
// copy. Reports whether it let go.
func (s *Store) ReleaseIdentity(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, copyWaiting bool, now time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE charges c SET identity_held = false, identity_released_at = $2
		WHERE c.id = $1 AND `+releasableSQL("$3::boolean"), chargeID, now, copyWaiting)
	if err != nil {
		return false, fmt.Errorf("release bill identity: %w", err)
	}
	return tag.RowsAffected() == 1, nil
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
func ListPaidTwice(ctx context.Context, db DBTX, limit int) ([]PaidTwice, error) {
	rows, err := db.Query(ctx, `SELECT bill_identity, array_agg(id ORDER BY created_at, id) FROM charges
		WHERE bill_identity IS NOT NULL AND status = `+fsm.Quoted(Succeeded)+`
		GROUP BY bill_identity HAVING count(*) > 1 ORDER BY bill_identity LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("bill identities paid twice: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PaidTwice])
}
