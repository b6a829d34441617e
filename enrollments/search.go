package enrollments

import (
	"context"

	"github.com/google/uuid"

	"github.com/rebill/rebill/platform/pg"
)

// Reads for staff looking a bill up (the support console's search): by
// rebill's id, or by the reference a customer reads off the bill.

// BillByID returns the bill rebill knows by id. Returns ErrBillNotFound.
func BillByID(ctx context.Context, db pg.DBTX, id uuid.UUID) (Bill, error) {
	return scanBill(db.QueryRow(ctx, `SELECT `+billColumns+` FROM bills WHERE id = $1`, id))
}

// BillsByReference returns, oldest first and at most limit, the bills
// whose issuer's bill id is ref or that are the fine whose UIN is ref
// (the Identity of a fine), across enrollments and customers.
func BillsByReference(ctx context.Context, db pg.DBTX, ref string, limit int) ([]Bill, error) {
	return collectBills(db.Query(ctx, `SELECT `+billColumns+` FROM bills WHERE bill_id = $1 OR identity = $2
		ORDER BY id LIMIT $3`, ref, Identity(Fines, AccountRef{}, ref), limit))
}
