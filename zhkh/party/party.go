// Package party is the port to GIS ZhKH's payment information (ГИС ЖКХ,
// "информация о внесении платы"), beside charges/registry: under 209-FZ
// whoever accepts payment for housing and utilities places the
// information of each payment in GIS ZhKH, which rebill does through a
// reporting party, the bank or payment agent that connects to GIS ZhKH
// (docs/registry.md, "A housing payment reported to GIS ZhKH"). It holds
// what a party is ([Party]), what crosses the wire ([Payment], [Status]),
// the party's errors, the balancing over several parties ([Balancer]) and
// the report identifiers ([ReportID]). It knows no database and imports no
// rebill domain package: the reports, their state machine and the jobs
// that drive them belong to package zhkh. Adapters: partyapi (the HTTP
// party), sim (dev mode's simulated party); test kit: testkit/partyfake
// (the other side of partyapi) and testkit/partytest, the conformance
// suite every adapter runs.
//
// # Exactly once at the party
//
// A report's id is derived from the bill's charge key alone (ReportID): a
// capture happens once per charge, and a bill has one charge, so every retry of its report (a timeout, a
// crash, another party, another node) is a replay the party recognises and
// records nothing new for; the day the report is sent plays no part, so a
// retry past midnight is the same report.
package party

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Party is one way into GIS ZhKH.
type Party interface {
	Name() string
	// Report places the payment information p. Reporting an id the party
	// holds is a replay: it answers as for the first and records nothing
	// new. Returns ErrUnavailable (nothing was done), ErrUnknownOutcome
	// (the answer was lost), a *PendingError (taken, no outcome yet), a
	// *RefusedError (GIS ZhKH refuses it for good, with its reason), or
	// ErrCancelled (a replay of a report the party holds cancelled).
	Report(ctx context.Context, p Payment) error
	// Cancel annuls the payment information of reportID (its money was
	// returned); cancelling one that is cancelled or unknown changes
	// nothing. Returns ErrUnavailable, ErrUnknownOutcome, or a
	// *PendingError while the report itself has no outcome yet.
	Cancel(ctx context.Context, reportID string) error
	// Lookup tells what the party holds under reportID, and for a refused
	// report the reason. Returns ErrUnavailable.
	Lookup(ctx context.Context, reportID string) (Status, string, error)
}

// Status is what a party holds of one report.
type Status string

// The statuses of a report at the party.
const (
	// StatusNotFound: the party holds nothing under the id.
	StatusNotFound Status = "not_found"
	// StatusProcessing: taken, GIS ZhKH has not answered yet.
	StatusProcessing Status = "processing"
	// StatusAccepted: GIS ZhKH holds the payment information.
	StatusAccepted Status = "accepted"
	// StatusRefused: GIS ZhKH refused it (the reason says why).
	StatusRefused Status = "refused"
	// StatusCancelled: it was accepted, then annulled.
	StatusCancelled Status = "cancelled"
)

// Payment is the payment information of one captured housing payment.
// The identifiers GIS ZhKH matches a payment to its payment document by
// (the payment document's ИПД, the service's ИЖКУ, the period, the
// supplier) are optional: a bill that does not carry them is reported by
// its account (ЕЛС) and bill id, which the supplier matches by itself.
type Payment struct {
	// ReportID is the report's identifier (ReportID).
	ReportID string
	// Account is the payer's single personal account number (ЕЛС).
	Account string
	// BillID is the bill's id at its source.
	BillID string
	// Amount is what was captured, in minor units of Currency.
	Amount   int64
	Currency string
	// PaidAt is when the money was captured: the date of the payment.
	PaidAt time.Time
	// PaymentRef is rebill's own reference of the payment, for the party's
	// statement: the bill's charge key, which a charge re-created after a
	// database restore keeps (its row id it does not).
	PaymentRef        string
	PaymentDocumentID string // ИПД
	ServiceID         string // ИЖКУ
	Period            string // YYYY-MM
	SupplierINN       string
	SupplierKPP       string
	SupplierName      string
}

var (
	// ErrUnavailable: the party did nothing (down, overloaded, refused
	// rebill's credentials).
	ErrUnavailable = errors.New("GIS ZhKH party unavailable")
	// ErrUnknownOutcome: the call may or may not have been carried out.
	ErrUnknownOutcome = errors.New("GIS ZhKH party's answer lost")
	// ErrRefused: GIS ZhKH refuses the report for good (see RefusedError).
	ErrRefused = errors.New("GIS ZhKH refused the payment information")
	// ErrCancelled: the party holds the report cancelled; a replay does
	// not make it stand again.
	ErrCancelled = errors.New("the party holds the payment information cancelled")
)

// RefusedError is a refusal for good, with the reason GIS ZhKH gave (an
// unknown payment document, a supplier not registered...).
type RefusedError struct {
	Party  string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: GIS ZhKH refused the payment information: %s", e.Party, e.Reason)
}

// Is makes a refusal ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Refused returns err's *RefusedError, if it has one.
func Refused(err error) (*RefusedError, bool) {
	var re *RefusedError
	ok := errors.As(err, &re)
	return re, ok
}

// PendingError is a party's answer that it took the call but GIS ZhKH has
// not answered yet (it is asynchronous): ask again later. It is an
// unknown outcome (errors.Is(err, ErrUnknownOutcome)) from a healthy party.
type PendingError struct {
	Party string
	// RetryAfter is how long the party asks to be left alone; zero: it
	// did not say.
	RetryAfter time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("%s: still processing at GIS ZhKH, ask again in %s", e.Party, e.RetryAfter)
}

// Is makes a pending answer an unknown outcome.
func (e *PendingError) Is(target error) bool { return target == ErrUnknownOutcome }

// Pending returns err's *PendingError, if it has one.
func Pending(err error) (*PendingError, bool) {
	var pe *PendingError
	ok := errors.As(err, &pe)
	return pe, ok
}

// ReportID derives the report identifier of the payment of the bill
// charge with key (its enrollment and bill id, "<enrollment>:<bill_id>"):
// 32 hexadecimal digits, the same on every node, every retry and every
// day, and after a database restore that re-created the charge under
// another id, so that the party takes the report again as a replay.
func ReportID(key string) string {
	sum := sha256.Sum256([]byte("zhkh-report:" + key))
	return hex.EncodeToString(sum[:16])
}
