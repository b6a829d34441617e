// Package zhkh reports every captured housing payment to GIS ZhKH (ГИС
// ЖКХ), as 209-FZ has whoever accepts payment for housing and utilities
// place its information there, through a reporting party (the bank or
// payment agent that connects to GIS ZhKH; the port is zhkh/party). It
// owns the reports (the zhkh_reports table), their state machine and the
// River jobs that drive them; the charge pipeline knows nothing of it:
// the owner of a housing bill's charge (autopay) hands it each capture,
// and the refunds' events each refund, in the transaction that records
// them ([Reporter.Captured], [Reporter.Refunded]).
//
// # The report follows the capture
//
// A fine is posted to GIS GMP between its hold and its capture, since the
// fine counts as paid only once the registry holds its payment. A housing
// payment is the other way round: GIS ZhKH is told of money that moved,
// so a report exists only for a captured charge, and a report refused by
// GIS ZhKH leaves the money captured (the supplier has it) and goes to a
// person (the review list, [Review]; rebill_zhkh_reports_in_review).
//
// # States
//
// Every allowed move is listed once, in [Machine]'s table, and each is a
// guarded UPDATE (`WHERE status = ANY(from)`), so a job that runs twice,
// or late, changes nothing the second time.
//
//	pending --(the party holds it)--> accepted --(refunded in full)--> cancel_pending --(annulled there)--> cancelled
//	pending --(GIS ZhKH refused it: money stays captured, review)--> refused
//	pending --(refunded in full before the party held it)--> cancel_pending
//	pending --(the party holds it cancelled)--> cancelled
//
// refused and cancelled are final. A report is sent under its id (derived
// from the charge, party.ReportID) until the party says what it holds; a
// run that finds the report sent before (sent_at: an answer lost, a crash)
// looks it up by that id before sending it again. A party out of reach is
// waited for, never given up on: the job snoozes with a growing wait, and
// rebill_zhkh_reports_overdue tells people when a report is past the
// deadline the rules set ([DueBy]).
package zhkh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/zhkh/party"
)

// Status is where a report stands.
type Status string

const (
	// Pending: the payment was captured; its information is being sent
	// to the party (and, once sent, looked up before it is sent again).
	Pending Status = "pending"
	// Accepted: GIS ZhKH holds the payment information. Left by a full
	// refund only.
	Accepted Status = "accepted"
	// Refused: GIS ZhKH refused it for good; the money stays captured and
	// the report awaits a person (review_reason). Final.
	Refused Status = "refused"
	// CancelPending: the payment was refunded in full; the annulment of
	// its information is being sent.
	CancelPending Status = "cancel_pending"
	// Cancelled: the party holds the information annulled, or never held
	// it (refunded before it was reported). Final.
	Cancelled Status = "cancelled"
)

var transitions = map[Status][]Status{
	Pending:       {Accepted, Refused, CancelPending, Cancelled},
	Accepted:      {CancelPending},
	CancelPending: {Cancelled},
	Refused:       nil,
	Cancelled:     nil,
}

// Statuses lists every report status, in the order of the life cycle.
var Statuses = []Status{Pending, Accepted, Refused, CancelPending, Cancelled}

// Machine is the report state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var Machine = fsm.New("GIS ZhKH report", Statuses, transitions)

// Capture is what a captured housing payment is reported with. Account,
// BillID, Amount, Currency and CapturedAt are always known; the payment
// document's identifiers and the supplier are reported when the bill
// carries them.
type Capture struct {
	ChargeID     uuid.UUID
	EnrollmentID uuid.UUID
	// Account is the payer's single personal account number (ЕЛС).
	Account    string
	BillID     string
	Amount     int64
	Currency   string
	CapturedAt time.Time

	PaymentDocumentID string // ИПД
	ServiceID         string // ИЖКУ
	Period            string // YYYY-MM
	SupplierINN       string
	SupplierKPP       string
	SupplierName      string
}

// Report is rebill's record of one capture's report.
type Report struct {
	ReportID       string
	Capture        Capture
	AmountRefunded int64
	Status         Status
	// DueAt is when the party must have what the status sends (DueBy).
	DueAt time.Time
	// SentAt is when the report was last sent (about to be); nil: never.
	// CancelSentAt is when its annulment was first sent.
	SentAt       *time.Time
	CancelSentAt *time.Time
	Party        string
	LastError    string
	// ReviewReason is why a person must look at it; Reviewed once one has.
	ReviewReason string
	ReviewedAt   *time.Time
	ReviewedBy   string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ErrNotFound: no report of that id (or charge).
var ErrNotFound = fault.New(fault.NotFound, "GIS ZhKH report not found")

const columns = `report_id, charge_id, enrollment_id, account, bill_id, coalesce(payment_document_id, ''),
	coalesce(service_id, ''), coalesce(period, ''), coalesce(supplier_inn, ''), coalesce(supplier_kpp, ''),
	coalesce(supplier_name, ''), amount, currency, amount_refunded, captured_at, status, due_at, sent_at, cancel_sent_at,
	coalesce(party, ''), coalesce(last_error, ''), coalesce(review_reason, ''), reviewed_at, coalesce(reviewed_by, ''),
	created_at, updated_at`

func scan(row pgx.Row) (Report, error) {
	var r Report
	c := &r.Capture
	err := row.Scan(&r.ReportID, &c.ChargeID, &c.EnrollmentID, &c.Account, &c.BillID, &c.PaymentDocumentID, &c.ServiceID,
		&c.Period, &c.SupplierINN, &c.SupplierKPP, &c.SupplierName, &c.Amount, &c.Currency, &r.AmountRefunded, &c.CapturedAt,
		&r.Status, &r.DueAt, &r.SentAt, &r.CancelSentAt, &r.Party, &r.LastError, &r.ReviewReason, &r.ReviewedAt, &r.ReviewedBy,
		&r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Report{}, ErrNotFound
	}
	if err != nil {
		return Report{}, fmt.Errorf("read GIS ZhKH report: %w", err)
	}
	c.CapturedAt, r.DueAt, r.CreatedAt, r.UpdatedAt = c.CapturedAt.UTC(), r.DueAt.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

// Get returns one report. Returns ErrNotFound.
func Get(ctx context.Context, db pg.DBTX, reportID string) (Report, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM zhkh_reports WHERE report_id = $1`, reportID))
}

// OfCharge returns the report of a charge's capture. Returns ErrNotFound
// when it has none (not a housing payment, or not captured).
func OfCharge(ctx context.Context, db pg.DBTX, chargeID uuid.UUID) (Report, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM zhkh_reports WHERE charge_id = $1`, chargeID))
}

// Review lists the reports awaiting a person (refused by GIS ZhKH,
// review_reason says why; or refunded in part), by report id, after the
// report id after ("": from the first).
func Review(ctx context.Context, db pg.DBTX, after string, limit int) ([]Report, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM zhkh_reports
		WHERE review_reason IS NOT NULL AND reviewed_at IS NULL AND report_id > $1 ORDER BY report_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("GIS ZhKH reports in review: %w", err)
	}
	defer rows.Close()
	var out []Report
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// IDOf is the id of the report of capture c: of its charge's key, not its
// id (party.ReportID).
func IDOf(c Capture) string { return party.ReportID(c.EnrollmentID.String() + ":" + c.BillID) }

// Reviewed records that actor has seen to a report in review (told the
// supplier, or the party, of the refused payment). Returns ErrNotFound
// when no report of that id awaits review.
func Reviewed(ctx context.Context, db pg.DBTX, reportID, actor string, now time.Time) error {
	tag, err := db.Exec(ctx, `UPDATE zhkh_reports SET reviewed_at = $2, reviewed_by = $3, updated_at = $2
		WHERE report_id = $1 AND review_reason IS NOT NULL AND reviewed_at IS NULL`, reportID, now, actor)
	if err != nil {
		return fmt.Errorf("review GIS ZhKH report %s: %w", reportID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// move is the one guarded move of a report: from one of from to to, as the
// table allows it (a *fsm.TransitionError, nothing written, otherwise),
// with set's assignments besides (over $4 on); false when it was not in
// from.
func move(ctx context.Context, db pg.DBTX, reportID string, from []Status, to Status, now time.Time, set string,
	args ...any) (bool, error) {
	mv, err := Machine.Move(to, from...)
	if err != nil {
		return false, err
	}
	query := `UPDATE zhkh_reports SET status = $2, updated_at = $3`
	if set != "" {
		query += ", " + set
	}
	query += fmt.Sprintf(` WHERE report_id = $1 AND status = ANY($%d)`, len(args)+4)
	all := append(append([]any{reportID, string(mv.To()), now}, args...), fsm.Texts(mv.From()))
	tag, err := db.Exec(ctx, query, all...)
	if err != nil {
		return false, fmt.Errorf("GIS ZhKH report %s to %s: %w", reportID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// moscow is the zone of the days the rules count in (Moscow has kept
// UTC+3 since 2014).
var moscow = time.FixedZone("MSK", 3*60*60)

// DueBy is the deadline of the information of a payment received (or
// refunded) at t: the end of the following day, Moscow time. The rule is
// read from the banks' notices to their clients and the orders under
// 209-FZ (docs/registry.md, "A housing payment reported to GIS ZhKH"; the
// day's zone is an assumption there, marked unverified).
func DueBy(t time.Time) time.Time {
	d := t.In(moscow)
	return time.Date(d.Year(), d.Month(), d.Day()+2, 0, 0, 0, 0, moscow).UTC()
}

// ChargesOf maps the ids among reportIDs that are rebill's reports to
// the charges whose captures they report.
func ChargesOf(ctx context.Context, db pg.DBTX, reportIDs []string) (map[string]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT report_id, charge_id FROM zhkh_reports WHERE report_id = ANY($1)`, reportIDs)
	if err != nil {
		return nil, fmt.Errorf("charges of GIS ZhKH reports: %w", err)
	}
	defer rows.Close()
	out := map[string]uuid.UUID{}
	for rows.Next() {
		var id string
		var charge uuid.UUID
		if err := rows.Scan(&id, &charge); err != nil {
			return nil, fmt.Errorf("charges of GIS ZhKH reports: %w", err)
		}
		out[id] = charge
	}
	return out, rows.Err()
}
