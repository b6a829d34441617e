package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/enrollments"
)

// Event type prefixes of enrollments and bills.
const (
	enrollmentPrefix = "enrollment."
	billPrefix       = "bill."
)

// EnrollmentChanged records enrollment.<eventType>.
func (r *Recorder) EnrollmentChanged(ctx context.Context, tx pgx.Tx, eventType string, e enrollments.Enrollment, at time.Time) error {
	_, err := r.Record(ctx, tx, enrollmentPrefix+eventType, e.ID, nil, e.CustomerID, apiobjects.FromEnrollment(e), at, "")
	return err
}

// BillChanged records bill.<eventType>; its parent is the bill's
// enrollment.
func (r *Recorder) BillChanged(ctx context.Context, tx pgx.Tx, eventType string, b enrollments.Bill, at time.Time) error {
	parent := b.EnrollmentID
	// Its fact is the enrollment and the issuer's bill id, not the row's
	// id: a bill a restore forgot is received again under a new one.
	_, err := r.record(ctx, tx, billPrefix+eventType, b.EnrollmentID.String()+":"+b.BillID, b.ID, &parent, b.CustomerID,
		apiobjects.FromBill(b, at), at, "")
	return err
}

// BillStored restates b, read at at, in the events tx wrote of it.
func (r *Recorder) BillStored(ctx context.Context, tx pgx.Tx, b enrollments.Bill, at time.Time) error {
	return r.Restate(ctx, tx, b.ID, apiobjects.FromBill(b, at))
}
