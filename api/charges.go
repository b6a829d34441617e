package api

import (
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/usecases"
)

type chargeJSON = apiobjects.Charge

func toChargeJSON(c charges.Charge) chargeJSON { return apiobjects.FromCharge(c) }

// chargeCursor names the charges' lists' pages: they are in id order.
func chargeCursor(c charges.Charge) string { return c.ID.String() }

func (s *Server) listSubscriptionCharges(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, idCursor, underPath(r, func(id, before uuid.UUID, limit int) ([]charges.Charge, error) {
		return s.Billing.SubscriptionCharges(r.Context(), callerFrom(r), id, before, limit)
	}), toChargeJSON, chargeCursor)
}

func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := s.Billing.Charge(r.Context(), callerFrom(r), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toChargeJSON(c))
}

func (s *Server) reviewQueue(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, func(c string) (*charges.ReviewCursor, bool) {
		after, err := charges.ParseReviewCursor(c)
		return &after, err == nil
	}, func(after *charges.ReviewCursor, limit int) ([]charges.Charge, error) {
		return s.Billing.ReviewQueue(r.Context(), after, limit)
	}, toChargeJSON, func(c charges.Charge) string {
		return charges.ReviewCursorOf(c).String()
	})
}

type resolveRequest struct {
	Outcome  string `json:"outcome"`
	Evidence string `json:"evidence"`
}

func (s *Server) resolveCharge(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toChargeJSON, func(tx pgx.Tx, id uuid.UUID, req resolveRequest) (charges.Charge, error) {
		p := principalFrom(r.Context())
		return s.Billing.ResolveCharge(r.Context(), tx, p.Caller(), id, charges.Resolution{
			Outcome: charges.Status(req.Outcome), Evidence: req.Evidence, Actor: string(p.Role) + ":" + p.ID})
	})
}

func (s *Server) retryCharge(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toChargeJSON, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (charges.Charge, error) {
		return s.Billing.RetryCharge(r.Context(), tx, callerFrom(r), id)
	})
}

// refundRequest is POST /v1/charges/{id}/refunds's body.
type refundRequest struct {
	Amount   *int64 `json:"amount"`
	Reason   string `json:"reason"`
	Evidence string `json:"evidence"`
}

// refundCharge answers 201 with the refund, pending: it is sent to the
// gateway by its job, and its outcome arrives as refund.succeeded or
// refund.failed (or in GET /v1/charges/{id}/refunds).
func (s *Server) refundCharge(w http.ResponseWriter, r *http.Request) {
	var req refundRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	refund, err := s.Billing.RefundCharge(r.Context(), tx, p.Caller(), id, usecases.RefundInput{Amount: req.Amount,
		Reason: charges.RefundReason(req.Reason), Evidence: req.Evidence, Actor: string(p.Role) + ":" + p.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, apiobjects.FromRefund(refund))
}

func (s *Server) listChargeRefunds(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, seqCursor(1), underPath(r, func(id uuid.UUID, after int64, limit int) ([]charges.Refund, error) {
		return s.Billing.ChargeRefunds(r.Context(), callerFrom(r), id, after, limit)
	}), apiobjects.FromRefund, func(rf charges.Refund) string { return strconv.Itoa(rf.N) })
}
