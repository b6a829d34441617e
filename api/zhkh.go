package api

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/zhkh"
)

// ZhkhReports are the GIS ZhKH reports of captured housing payments as
// staff read and review them (zhkh.Reporter).
type ZhkhReports interface {
	// ReportOf returns the report of a charge's capture. Returns
	// zhkh.ErrNotFound when it has none.
	ReportOf(ctx context.Context, chargeID uuid.UUID) (zhkh.Report, error)
	// ReviewPage lists the reports awaiting a person after report id
	// after.
	ReviewPage(ctx context.Context, after string, limit int) ([]zhkh.Report, error)
	// MarkReviewed records, in tx, that actor has seen to the report.
	// Returns zhkh.ErrNotFound when it awaits no review.
	MarkReviewed(ctx context.Context, tx pgx.Tx, chargeID uuid.UUID, actor string) (zhkh.Report, error)
}

// zhkhReportJSON is a report as the API shows it.
type zhkhReportJSON struct {
	ReportID          string     `json:"report_id"`
	ChargeID          uuid.UUID  `json:"charge_id"`
	EnrollmentID      uuid.UUID  `json:"enrollment_id"`
	Account           string     `json:"account"`
	BillID            string     `json:"bill_id"`
	PaymentDocumentID *string    `json:"payment_document_id"`
	ServiceID         *string    `json:"service_id"`
	Period            *string    `json:"period"`
	SupplierINN       *string    `json:"supplier_inn"`
	Amount            int64      `json:"amount"`
	AmountRefunded    int64      `json:"amount_refunded"`
	Currency          string     `json:"currency"`
	Status            string     `json:"status"`
	CapturedAt        time.Time  `json:"captured_at"`
	DueAt             time.Time  `json:"due_at"`
	SentAt            *time.Time `json:"sent_at"`
	Party             *string    `json:"party"`
	LastError         *string    `json:"last_error"`
	ReviewReason      *string    `json:"review_reason"`
	ReviewedAt        *time.Time `json:"reviewed_at"`
	ReviewedBy        *string    `json:"reviewed_by"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
}

func toZhkhReportJSON(r zhkh.Report) zhkhReportJSON {
	c := r.Capture
	return zhkhReportJSON{ReportID: r.ReportID, ChargeID: c.ChargeID, EnrollmentID: c.EnrollmentID, Account: c.Account,
		BillID: c.BillID, PaymentDocumentID: optional(c.PaymentDocumentID), ServiceID: optional(c.ServiceID),
		Period: optional(c.Period), SupplierINN: optional(c.SupplierINN), Amount: c.Amount, AmountRefunded: r.AmountRefunded,
		Currency: c.Currency, Status: string(r.Status), CapturedAt: c.CapturedAt, DueAt: r.DueAt, SentAt: r.SentAt,
		Party: optional(r.Party), LastError: optional(r.LastError), ReviewReason: optional(r.ReviewReason),
		ReviewedAt: r.ReviewedAt, ReviewedBy: optional(r.ReviewedBy), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// zhkhRoutes are staff's reads and reviews of the GIS ZhKH reports; none
// without reports (no party configured).
func (s *Server) zhkhRoutes(staff chi.Router) {
	if s.Zhkh == nil {
		return
	}
	staff.Get("/v1/charges/{id}/zhkh-report", s.getZhkhReport)
	staff.Post("/v1/charges/{id}/zhkh-report/reviewed", s.reviewedZhkhReport)
	staff.Get("/v1/zhkh-review", s.zhkhReview)
}

func (s *Server) getZhkhReport(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.Zhkh.ReportOf(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toZhkhReportJSON(rep))
}

func (s *Server) reviewedZhkhReport(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toZhkhReportJSON, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (zhkh.Report, error) {
		p := principalFrom(r.Context())
		return s.Zhkh.MarkReviewed(r.Context(), tx, id, string(p.Role)+":"+p.ID)
	})
}

func (s *Server) zhkhReview(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, func(c string) (string, bool) {
		return c, len(c) == 32
	}, func(after string, limit int) ([]zhkh.Report, error) {
		return s.Zhkh.ReviewPage(r.Context(), after, limit)
	}, toZhkhReportJSON, func(rep zhkh.Report) string { return rep.ReportID })
}
