// Package enrollments holds autopay enrollments (housing bills, traffic
// fines) and their bills: validation of the payer's identifiers, the
// enrollment state machine, the bill life cycle, the scheduling rules that
// decide when and how much a bill is charged, and their store.
//
// The charging itself is the charges pipeline's: a bill's charge is keyed
// `<enrollment_id>:<bill_id>` and runs hold, capture, dunning and
// reconciliation like a subscription period's. Package autopay composes
// the two.
//
// # Enrollment statuses
//
// Every allowed move is listed once, in [Machine]'s table; the store
// refuses any other with a *fsm.TransitionError.
//
//	active --pause--> paused --resume--> active
//	active|paused --cancel--> cancelled (final)
//
// Every transition is a guarded UPDATE in the caller's transaction that
// publishes its event there; reaching a status already reached is a no-op
// that writes nothing, as for subscriptions.
//
// # Bill statuses
//
// Every allowed move is listed once, in [BillMachine]'s table (bills.go),
// which the store's one guarded move of a bill checks.
//
//	pending ----------------(resume)----------> scheduled | awaiting_confirmation
//	scheduled --------------(pause)-----------> pending
//	awaiting_confirmation --(confirm)---------> scheduled | pending (paused) | paying (its charge waits)
//	scheduled --------------(pay_at reached)--> paying (its charge exists)
//	scheduled --------------(a fine, no payment registry)--> awaiting_registry
//	awaiting_registry ------(a registry is configured)-----> scheduled | pending (paused)
//	paying -----------------(charge outcome)--> paid | failed
//	paying|failed ----------(a new attempt above what was confirmed)--> awaiting_confirmation
//	failed -----------------(card change, support retry)--> paying
//	failed|expired|duplicate --(a capture landed after all: recorded)--> paid
//	any but paid -----------(issuer annuls)---> withdrawn
//	pending|awaiting_confirmation|awaiting_registry|scheduled|failed --(last payable day over)--> expired
//	paying|failed|awaiting_confirmation --(its charge voided: its last start passed)--> expired
//	scheduled --------------(another copy's charge holds the bill's identity)--> duplicate
//	scheduled|paying|failed --(its own charge released the identity)--> duplicate (for good)
//	duplicate (never charged) --(the holder released the identity)--> scheduled | pending | awaiting_confirmation
//	any but paid, withdrawn, expired --(paid in full outside rebill)--> paid_elsewhere (final)
//
// A bill paid in part outside rebill keeps its status; its amount due is
// what is left (Bill.PaidOutside).
//
// A confirmation of a pending bill is recorded without a move: it stays
// pending until resume.
package enrollments

import (
	"time"
	_ "time/tzdata" // Europe/Moscow on machines without tzdata

	"github.com/google/uuid"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
)

// Kind is what an enrollment pays.
type Kind string

const (
	// Housing pays housing and utility bills (GIS ZhKH) by the payer's
	// single personal account number (ELS).
	Housing Kind = "housing"
	// Fines pays traffic fines (GIS GMP) found by the vehicle registration
	// certificate (STS) and/or the driving licence.
	Fines Kind = "fines"
)

// Status is where an enrollment stands.
type Status string

const (
	// Active: bills are paid as they fall due.
	Active Status = "active"
	// Paused: bills are kept pending; nothing new is charged until resume.
	Paused Status = "paused"
	// Cancelled: final; bills that arrive are left unpaid.
	Cancelled Status = "cancelled"
)

// Event types of enrollments, published as enrollment.<type>.
const (
	EventCreated              = "created"
	EventPaused               = "paused"
	EventResumed              = "resumed"
	EventCancelled            = "cancelled"
	EventPaymentMethodUpdated = "payment_method_updated"
)

// transitions lists, for every status, the statuses an enrollment may
// move to.
var transitions = map[Status][]Status{
	Active:    {Paused, Cancelled},
	Paused:    {Active, Cancelled},
	Cancelled: nil,
}

// Statuses lists every enrollment status, in the order of the life cycle.
var Statuses = []Status{Active, Paused, Cancelled}

// Machine is the enrollment state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var Machine = fsm.New("enrollment", Statuses, transitions)

// CanTransition reports whether an enrollment in status from may move to
// status to. Staying in the same status is not a transition.
func CanTransition(from, to Status) bool { return Machine.Can(from, to) }

// AccountRef is who the bill sources know the payer as: the ELS for
// housing; the STS and/or the driving licence for fines.
type AccountRef struct {
	ELS           string
	STS           string
	DriverLicense string
}

// Enrollment is a customer's consent to pay one kind of bill
// automatically, up to MaxAmount per bill without asking.
type Enrollment struct {
	ID         uuid.UUID
	CustomerID string
	Kind       Kind
	AccountRef AccountRef
	Status     Status
	Currency   string
	MaxAmount  int64
	// PayDay (housing, 1..28) is the day of the month to pay on; 0: on
	// arrival.
	PayDay        int
	PaymentMethod rebilltype.PaymentMethod
	Description   string
	Metadata      map[string]string
	// ReceiptCustomer is where the 54-FZ receipts of its bill payments are
	// sent, when rebill sends them (autopay.BillReceipts); nil: none
	// given, and rebill sends none of its own.
	ReceiptCustomer *subscriptions.ReceiptCustomer
	CreatedAt       time.Time
	UpdatedAt       time.Time
	CancelledAt     *time.Time
}

var (
	// ErrNotFound: no enrollment (or bill) with that id.
	ErrNotFound = fault.New(fault.NotFound, "enrollment not found")
	// ErrBillNotFound: the enrollment has no bill with that bill_id.
	ErrBillNotFound = fault.New(fault.NotFound, "bill not found")
	// ErrBillConflict: a bill with this bill_id exists with other content
	// (amount or dates): the issuer must use a new id.
	ErrBillConflict = fault.New(fault.Conflict, "a bill with this bill_id exists with different content")
	// ErrCreatedBefore: the id a creation derives from its request
	// (New.ID) is already an enrollment's: the request's Idempotency-Key
	// created it, and the key's stored response has expired since.
	ErrCreatedBefore = fault.New(fault.Conflict, "this Idempotency-Key already created an enrollment, and its stored response has expired: use a new key to create another")
)
