package enrollments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
)

// BillStatus is where a bill stands (see the package doc's diagram).
type BillStatus string

const (
	// BillPending: arrived while the enrollment was paused; scheduled (or
	// awaiting confirmation) on resume.
	BillPending BillStatus = "pending"
	// BillAwaitingConfirmation: its amount due is above the enrollment's
	// max_amount; charged once the customer confirms it.
	BillAwaitingConfirmation BillStatus = "awaiting_confirmation"
	// BillAwaitingRegistry: a fine that no payment registry is configured
	// to post to; scheduled again once one is (a fine is never captured
	// without being posted).
	BillAwaitingRegistry BillStatus = "awaiting_registry"
	// BillScheduled: charged at pay_at.
	BillScheduled BillStatus = "scheduled"
	// BillPaying: its charge exists and is being collected (hold, capture,
	// dunning).
	BillPaying BillStatus = "paying"
	// BillPaid: its charge succeeded. Final.
	BillPaid BillStatus = "paid"
	// BillFailed: its charge failed (hard decline, dunning exhausted, a
	// person's verdict); a payment-method change retries it while it is
	// payable.
	BillFailed BillStatus = "failed"
	// BillWithdrawn: the issuer annulled it; never charged. Final.
	BillWithdrawn BillStatus = "withdrawn"
	// BillExpired: its last payable day passed unpaid. Never charged
	// again; a capture that landed after all is still recorded (paid).
	BillExpired BillStatus = "expired"
	// BillDuplicate: a copy of a bill another enrollment pays (the same
	// fine, or the same account's bill, enrolled twice): never charged
	// here while that copy's charge holds the bill's identity. A copy
	// that never had a charge is scheduled again when that charge is
	// released; one whose own charge was released stays so for good.
	BillDuplicate BillStatus = "duplicate"
	// BillPaidElsewhere: paid in full outside rebill (at a bank, a kiosk,
	// another app), as the state payment registry (fines) or the bill's
	// source (housing) reports; never charged here. Final.
	BillPaidElsewhere BillStatus = "paid_elsewhere"
)

// billTransitions lists, for every status, the statuses a bill may move
// to. It is the one list of allowed moves: moveBill, under every change of
// a bill's status, asks [BillMachine] before its guarded UPDATE, and the
// package doc draws the same graph.
var billTransitions = map[BillStatus][]BillStatus{
	// Resume schedules it (or asks for a confirmation first).
	BillPending: {BillScheduled, BillAwaitingConfirmation, BillWithdrawn, BillExpired, BillPaidElsewhere},
	// The customer confirms: scheduled, kept pending while paused, or
	// paying again when its charge's new attempt waited for it.
	BillAwaitingConfirmation: {BillScheduled, BillPending, BillPaying, BillWithdrawn, BillExpired, BillPaidElsewhere},
	// A payment registry is configured.
	BillAwaitingRegistry: {BillScheduled, BillPending, BillWithdrawn, BillExpired, BillPaidElsewhere},
	// Its charge is created; or it waits for a registry, for resume, or
	// for another copy's charge.
	BillScheduled: {BillPaying, BillAwaitingRegistry, BillPending, BillDuplicate, BillWithdrawn, BillExpired, BillPaidElsewhere},
	// Its charge settles, or its new attempt needs a confirmation, or its
	// charge let go of the bill's identity, or the check before a hold
	// found it paid outside rebill.
	BillPaying: {BillPaid, BillFailed, BillAwaitingConfirmation, BillDuplicate, BillWithdrawn, BillExpired, BillPaidElsewhere},
	// A card change or a support retry starts a new attempt; a person
	// resolved its charge as paid.
	BillFailed: {BillPaying, BillPaid, BillAwaitingConfirmation, BillDuplicate, BillWithdrawn, BillExpired, BillPaidElsewhere},
	BillPaid:   nil,
	// Withdrawn is final.
	BillWithdrawn: nil,
	// A capture that landed is recorded whatever the bill's status said.
	BillExpired: {BillPaid, BillWithdrawn},
	// The charge holding the bill's identity let go of it: a copy never
	// charged takes its place; or the copy that held it was found paid
	// outside rebill, and so is this one.
	BillDuplicate: {BillScheduled, BillPending, BillAwaitingConfirmation, BillPaid, BillWithdrawn, BillPaidElsewhere},
	// Paid elsewhere is final: nothing of rebill's was held for it.
	BillPaidElsewhere: nil,
}

// BillStatuses lists every bill status, in the order of the life cycle.
var BillStatuses = []BillStatus{BillPending, BillAwaitingConfirmation, BillAwaitingRegistry, BillScheduled, BillPaying,
	BillPaid, BillFailed, BillWithdrawn, BillExpired, BillDuplicate, BillPaidElsewhere}

// BillMachine is the bill state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var BillMachine = fsm.New("bill", BillStatuses, billTransitions)

// CanBillTransition reports whether a bill in status from may move to
// status to. Staying in the same status is not a transition.
func CanBillTransition(from, to BillStatus) bool { return BillMachine.Can(from, to) }

// Bill events, published as bill.<type>.
const (
	BillEventReceived             = "received"
	BillEventAwaitingConfirmation = "awaiting_confirmation"
	BillEventAwaitingRegistry     = "awaiting_registry"
	BillEventPaid                 = "paid"
	BillEventFailed               = "failed"
	BillEventWithdrawn            = "withdrawn"
	BillEventExpired              = "expired"
	BillEventDuplicate            = "duplicate"
	BillEventPaidElsewhere        = "paid_elsewhere"
)

// Identity is what a bill is paid for, whichever enrollment carries it: a
// fine is paid once per UIN across the service, a housing bill once per
// account (its canonical ELS) and issuer's bill id. At most one charge
// holds an identity at a time (charges' unique index on it).
func Identity(kind Kind, ref AccountRef, billID string) string {
	if kind == Fines {
		return "uin:" + billID
	}
	return "els:" + ref.ELS + ":" + billID
}

// DocumentIdentity is the second identity of a housing bill that names
// its payment document (canonical ИПД): the document is paid once across
// the service, whichever account and bill id its copies came under. ""
// without one. A bill's charge claims both identities, so a copy of the
// bill without the document (same account and bill id) and a copy under
// another bill id with the document each find one of them held.
func DocumentIdentity(paymentDocumentID string) string {
	if paymentDocumentID == "" {
		return ""
	}
	return "ipd:" + paymentDocumentID
}

// Bill is one amount owed by an enrollment's payer.
type Bill struct {
	ID               uuid.UUID
	EnrollmentID     uuid.UUID
	CustomerID       string
	BillID           string
	Amount           int64
	DiscountedAmount *int64
	DiscountDeadline *Date
	IssuedAt         time.Time
	DueDate          Date
	Status           BillStatus
	PayAt            time.Time
	ExpiresAt        time.Time
	ConfirmedAt      *time.Time
	// ConfirmedAmount is what the customer's confirmation covers: the
	// amount due when they confirmed. A higher price needs a new one.
	ConfirmedAmount *int64
	// PaidAmount is what its charge captured.
	PaidAmount *int64
	ChargeID   *uuid.UUID
	PaidAt     *time.Time
	ReceivedAt time.Time
	UpdatedAt  time.Time
	// Identity is the bill's identity (see Identity).
	Identity string
	// PaidByEnrollmentID is, for a duplicate, the enrollment whose copy
	// is being paid (staff only: it may be another customer's).
	PaidByEnrollmentID *uuid.UUID
	// PaidOutside is what was last reported paid against the bill outside
	// rebill (the registry for a fine, the source for a housing bill):
	// the amount due is what is left of the price.
	PaidOutside int64
	// SourcePaid is what a fine's source last reported paid against it
	// (SourceReported): never counted, it only has the registry asked.
	SourcePaid int64
	// PaymentDocumentID, ServiceID, Period and Supplier are a housing
	// bill's GIS ZhKH identifiers as first stored ("" when not given).
	PaymentDocumentID string
	ServiceID         string
	Period            string
	Supplier          Supplier
	// DocumentIdentity is the bill's second identity (DocumentIdentity),
	// "" without a payment document.
	DocumentIdentity string
}

// Identities are the identities b claims: its Identity, and its
// DocumentIdentity when it names a payment document.
func (b Bill) Identities() []string {
	if b.DocumentIdentity == "" {
		return []string{b.Identity}
	}
	return []string{b.Identity, b.DocumentIdentity}
}

// DiscountEnds is the end of the discount deadline's day, nil without a
// discount.
func (b Bill) DiscountEnds() *time.Time {
	if b.DiscountDeadline == nil {
		return nil
	}
	end := b.DiscountDeadline.End()
	return &end
}

// AmountDue is what the bill costs when its attempt starts at t (see the
// function AmountDue), less what was paid outside rebill; a paid bill's
// is what was captured, whenever it is read, and a bill paid elsewhere
// costs nothing.
func (b Bill) AmountDue(t time.Time) int64 {
	switch {
	case b.Status == BillPaid && b.PaidAmount != nil:
		return *b.PaidAmount
	case b.Status == BillPaidElsewhere:
		return 0
	}
	return max(AmountDue(b.Amount, b.DiscountedAmount, b.DiscountEnds(), t)-b.PaidOutside, 0)
}

// overCap reports whether b, charged at t, costs more than the
// enrollment's max_amount and than what its confirmation covers.
func (b Bill) overCap(e Enrollment, t time.Time) bool {
	allowed := e.MaxAmount
	if b.ConfirmedAmount != nil {
		allowed = max(allowed, *b.ConfirmedAmount)
	}
	return b.AmountDue(t) > allowed
}

// sameContent reports whether in is the bill as it was first pushed.
func (b Bill) sameContent(in BillInput) bool {
	sameDate := func(a, c *Date) bool { return (a == nil) == (c == nil) && (a == nil || a.String() == c.String()) }
	sameAmount := func(a, c *int64) bool { return (a == nil) == (c == nil) && (a == nil || *a == *c) }
	// An identifier that one of the two leaves out is no difference: a
	// copy of the bill with or without its GIS ZhKH identifiers is the
	// bill, and the first copy's stand.
	sameText := func(a, c string) bool { return a == "" || c == "" || a == c }
	return b.Amount == in.Amount && b.IssuedAt.Equal(in.IssuedAt.Truncate(time.Microsecond)) &&
		b.DueDate.String() == in.DueDate.String() && sameDate(b.DiscountDeadline, in.DiscountDeadline) &&
		sameAmount(b.DiscountedAmount, in.DiscountedAmount) && sameText(b.PaymentDocumentID, in.PaymentDocumentID) &&
		sameText(b.ServiceID, in.ServiceID) && sameText(b.Period, in.Period) && sameText(b.Supplier.INN, in.Supplier.INN) &&
		sameText(b.Supplier.KPP, in.Supplier.KPP) && sameText(b.Supplier.Name, in.Supplier.Name)
}

const billColumns = `id, enrollment_id, customer_id, bill_id, amount, discounted_amount, discount_deadline, issued_at, due_date,
	status, pay_at, expires_at, confirmed_at, charge_id, paid_at, received_at, updated_at, confirmed_amount, paid_amount,
	identity, paid_by_enrollment_id, paid_outside, source_paid, coalesce(payment_document_id, ''), coalesce(service_id, ''),
	coalesce(period, ''), coalesce(supplier_inn, ''), coalesce(supplier_kpp, ''), coalesce(supplier_name, ''),
	coalesce(document_identity, '')`

func scanBill(row pgx.Row) (Bill, error) {
	var b Bill
	var deadline *time.Time
	var due time.Time
	err := row.Scan(&b.ID, &b.EnrollmentID, &b.CustomerID, &b.BillID, &b.Amount, &b.DiscountedAmount, &deadline, &b.IssuedAt,
		&due, &b.Status, &b.PayAt, &b.ExpiresAt, &b.ConfirmedAt, &b.ChargeID, &b.PaidAt, &b.ReceivedAt, &b.UpdatedAt,
		&b.ConfirmedAmount, &b.PaidAmount, &b.Identity, &b.PaidByEnrollmentID, &b.PaidOutside, &b.SourcePaid,
		&b.PaymentDocumentID, &b.ServiceID, &b.Period, &b.Supplier.INN, &b.Supplier.KPP, &b.Supplier.Name, &b.DocumentIdentity)
	if errors.Is(err, pgx.ErrNoRows) {
		return Bill{}, ErrBillNotFound
	}
	if err != nil {
		return Bill{}, fmt.Errorf("scan bill: %w", err)
	}
	b.DueDate = NewDate(due)
	if deadline != nil {
		d := NewDate(*deadline)
		b.DiscountDeadline = &d
	}
	b.IssuedAt, b.PayAt, b.ExpiresAt = b.IssuedAt.UTC(), b.PayAt.UTC(), b.ExpiresAt.UTC()
	b.ReceivedAt, b.UpdatedAt = b.ReceivedAt.UTC(), b.UpdatedAt.UTC()
	return b, nil
}

func collectBills(rows pgx.Rows, err error) ([]Bill, error) {
	if err != nil {
		return nil, fmt.Errorf("query bills: %w", err)
	}
	bills, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Bill, error) { return scanBill(row) })
	if err != nil {
		return nil, fmt.Errorf("query bills: %w", err)
	}
	return bills, nil
}

func (st *Store) publishBill(ctx context.Context, tx pgx.Tx, typ string, b Bill, at time.Time) error {
	if st.events == nil {
		return nil
	}
	if err := st.events.BillChanged(ctx, tx, typ, b, at); err != nil {
		return fmt.Errorf("publish bill.%s: %w", typ, err)
	}
	return nil
}

func dateOrNil(d *Date) *time.Time {
	if d == nil {
		return nil
	}
	t := d.Time()
	return &t
}

// Push stores a bill for the enrollment e, whose row the caller locked
// (GetForUpdate): one bill per enrollment and bill id, whichever path
// brings it and however often. Returns the bill and whether this call
// created it; ErrBillConflict when the bill id exists with other content;
// a *fsm.TransitionError for a cancelled enrollment. A new bill is scheduled
// per rules, kept pending while the enrollment is paused, and awaits
// confirmation when its amount due at pay_at is above max_amount; one
// that arrives at or after its last moment to start an attempt
// (Rules.LastStart) is stored expired and never charged.
func (st *Store) Push(ctx context.Context, tx pgx.Tx, e Enrollment, in BillInput, rules Rules) (Bill, bool, error) {
	existing, err := scanBill(tx.QueryRow(ctx, `SELECT `+billColumns+` FROM bills WHERE enrollment_id = $1 AND bill_id = $2`,
		e.ID, in.BillID))
	switch {
	case err == nil && existing.sameContent(in):
		return existing, false, nil
	case err == nil:
		return existing, false, ErrBillConflict
	case !errors.Is(err, ErrBillNotFound):
		return Bill{}, false, err
	}
	if e.Status == Cancelled {
		return Bill{}, false, Machine.Refuse(Cancelled, Cancelled, "a cancelled enrollment takes no bills")
	}
	now := st.clock.Now()
	plan := rules.PlanBill(e.Kind, e.PayDay, in, now)
	status := BillScheduled
	switch {
	case !now.Before(rules.LastStart(plan.ExpiresAt)):
		status = BillExpired
	case e.Status == Paused:
		status = BillPending
	case AmountDue(in.Amount, in.DiscountedAmount, plan.DiscountEnds, plan.PayAt) > e.MaxAmount:
		status = BillAwaitingConfirmation
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Bill{}, false, fmt.Errorf("new bill id: %w", err)
	}
	b, err := scanBill(tx.QueryRow(ctx, `INSERT INTO bills (id, enrollment_id, customer_id, bill_id, amount, discounted_amount,
			discount_deadline, issued_at, due_date, status, pay_at, expires_at, received_at, updated_at, identity,
			payment_document_id, service_id, period, supplier_inn, supplier_kpp, supplier_name, document_identity)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $14,
			NULLIF($15, ''), NULLIF($16, ''), NULLIF($17, ''), NULLIF($18, ''), NULLIF($19, ''), NULLIF($20, ''), NULLIF($21, ''))
		ON CONFLICT (enrollment_id, bill_id) DO NOTHING
		RETURNING `+billColumns, id, e.ID, e.CustomerID, in.BillID, in.Amount, in.DiscountedAmount, dateOrNil(in.DiscountDeadline),
		in.IssuedAt, in.DueDate.Time(), status, plan.PayAt, plan.ExpiresAt, now, Identity(e.Kind, e.AccountRef, in.BillID),
		in.PaymentDocumentID, in.ServiceID, in.Period, in.Supplier.INN, in.Supplier.KPP, in.Supplier.Name,
		DocumentIdentity(in.PaymentDocumentID)))
	if err != nil {
		return Bill{}, false, fmt.Errorf("insert bill: %w", err)
	}
	if err := st.publishBill(ctx, tx, BillEventReceived, b, now); err != nil {
		return Bill{}, false, err
	}
	switch status {
	case BillAwaitingConfirmation:
		err = st.publishBill(ctx, tx, BillEventAwaitingConfirmation, b, now)
	case BillExpired:
		err = st.publishBill(ctx, tx, BillEventExpired, b, now)
	}
	if err != nil {
		return Bill{}, false, err
	}
	return b, true, nil
}

// GetBill returns the enrollment's bill with the issuer's bill id.
// Returns ErrBillNotFound.
func (st *Store) GetBill(ctx context.Context, db pg.DBTX, enrollmentID uuid.UUID, billID string) (Bill, error) {
	return scanBill(db.QueryRow(ctx, `SELECT `+billColumns+` FROM bills WHERE enrollment_id = $1 AND bill_id = $2`,
		enrollmentID, billID))
}

// BillByCharge returns the bill whose charge is chargeID. Returns
// ErrBillNotFound.
func (st *Store) BillByCharge(ctx context.Context, db pg.DBTX, chargeID uuid.UUID) (Bill, error) {
	return scanBill(db.QueryRow(ctx, `SELECT `+billColumns+` FROM bills WHERE charge_id = $1`, chargeID))
}

// FirstCopy returns the first copy received of the bill with identity
// (Identity): what its issuer billed, which later copies repeat. Returns
// ErrBillNotFound.
func FirstCopy(ctx context.Context, db pg.DBTX, identity string) (Bill, error) {
	return scanBill(db.QueryRow(ctx, `SELECT `+billColumns+` FROM bills WHERE identity = $1 ORDER BY received_at LIMIT 1`, identity))
}

// ListBills returns an enrollment's bills newest first, before the keyset
// cursor id (uuid.Nil: from the newest).
func (st *Store) ListBills(ctx context.Context, db pg.DBTX, enrollmentID, before uuid.UUID, limit int) ([]Bill, error) {
	var cursor *uuid.UUID
	if before != uuid.Nil {
		cursor = &before
	}
	return collectBills(db.Query(ctx, `SELECT `+billColumns+` FROM bills
		WHERE enrollment_id = $1 AND ($2::uuid IS NULL OR id < $2) ORDER BY id DESC LIMIT $3`, enrollmentID, cursor, limit))
}

func texts(statuses ...BillStatus) []string { return fsm.Texts(statuses) }

// moveBill is the one guarded move of a bill, under every change of its
// status: from one of from to to, as the machine allows it
// (BillMachine.Move), with extra assignments (parameters from $1),
// publishing event ("" for none). Returns ErrBillNotFound when the guard
// fails, a *fsm.TransitionError (nothing written) for a move the table
// forbids.
func (st *Store) moveBill(ctx context.Context, tx pgx.Tx, id uuid.UUID, from []BillStatus, to BillStatus, event string,
	set string, args ...any) (Bill, error) {
	mv, err := BillMachine.Move(to, from...)
	if err != nil {
		return Bill{}, err
	}
	return st.writeBill(ctx, tx, id, mv, event, set, args...)
}

// writeBill is the guarded UPDATE of a bill: under moveBill, and for a
// change of a bill that keeps its status (BillMachine.Within). It writes
// the move's status (none for Within) and set (parameters from $1) only
// while the bill's status is one of the move's From, publishing event (""
// for none). Returns ErrBillNotFound when the guard fails.
func (st *Store) writeBill(ctx context.Context, tx pgx.Tx, id uuid.UUID, mv fsm.Move[BillStatus], event string,
	set string, args ...any) (Bill, error) {
	if !mv.Stays() {
		assign := fmt.Sprintf("status = $%d", len(args)+1)
		if set != "" {
			assign += ", " + set
		}
		set, args = assign, append(args, mv.To())
	}
	now := st.clock.Now()
	n := len(args)
	query := fmt.Sprintf(`UPDATE bills SET %s, updated_at = $%d WHERE id = $%d AND status = ANY($%d) RETURNING `,
		set, n+1, n+2, n+3) + billColumns
	b, err := scanBill(tx.QueryRow(ctx, query, append(args, now, id, texts(mv.From()...))...))
	if err != nil {
		return Bill{}, err
	}
	if event != "" {
		if err := st.publishBill(ctx, tx, event, b, now); err != nil {
			return Bill{}, err
		}
		return b, nil
	}
	if st.events != nil { // a change without an event of its own
		if err := st.events.BillStored(ctx, tx, b, now); err != nil {
			return Bill{}, fmt.Errorf("restate bill %s: %w", b.ID, err)
		}
	}
	return b, nil
}
