package api

import (
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/notify/objects"
)

type chargeJSON = objects.Charge

func toChargeJSON(c charges.Charge) chargeJSON { return objects.FromCharge(c) }

func (s *Server) listSubscriptionCharges(w http.ResponseWriter, r *http.Request) {
	pg, err := pageParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	before, err := pg.idCursor()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cs, err := s.Billing.SubscriptionCharges(r.Context(), callerFrom(r), id, before, pg.limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list(cs, pg.limit, toChargeJSON, func(c charges.Charge) string { return c.ID.String() }))
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
	pg, err := pageParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var after *charges.ReviewCursor
	if pg.cursor != "" {
		c, err := charges.ParseReviewCursor(pg.cursor)
		if err != nil {
			s.fail(w, r, errBadCursor)
			return
		}
		after = &c
	}
	cs, err := s.Billing.ReviewQueue(r.Context(), after, pg.limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list(cs, pg.limit, toChargeJSON, func(c charges.Charge) string {
		return charges.ReviewCursor{UpdatedAt: c.UpdatedAt, ID: c.ID}.String()
	}))
}

type resolveRequest struct {
	Outcome  string `json:"outcome"`
	Evidence string `json:"evidence"`
}

// changeCharge decodes a POST on /v1/charges/{id}/..., runs one use case
// in the request's transaction, and answers the charge it returns.
func changeCharge[Req any](s *Server, w http.ResponseWriter, r *http.Request,
	use func(tx pgx.Tx, id uuid.UUID, req Req) (charges.Charge, error)) {
	var req Req
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := use(tx, id, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toChargeJSON(c))
}

func (s *Server) resolveCharge(w http.ResponseWriter, r *http.Request) {
	changeCharge(s, w, r, func(tx pgx.Tx, id uuid.UUID, req resolveRequest) (charges.Charge, error) {
		p := principalFrom(r.Context())
		return s.Billing.ResolveCharge(r.Context(), tx, p.Caller(), id, charges.Resolution{
			Outcome: charges.Status(req.Outcome), Evidence: req.Evidence, Actor: string(p.Role) + ":" + p.ID})
	})
}

func (s *Server) retryCharge(w http.ResponseWriter, r *http.Request) {
	changeCharge(s, w, r, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (charges.Charge, error) {
		return s.Billing.RetryCharge(r.Context(), tx, callerFrom(r), id)
	})
}
