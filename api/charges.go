package api

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
)

type chargeJSON struct {
	ID             uuid.UUID  `json:"id"`
	SubscriptionID uuid.UUID  `json:"subscription_id"`
	PeriodKey      string     `json:"period_key"`
	Key            string     `json:"key"`
	Amount         int64      `json:"amount"`
	Currency       string     `json:"currency"`
	Gateway        string     `json:"gateway"`
	Status         string     `json:"status"`
	AttemptCount   int        `json:"attempt_count"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	FailureCode    *string    `json:"failure_code"`
	ReviewReason   *string    `json:"review_reason"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func toChargeJSON(c charges.Charge) chargeJSON {
	return chargeJSON{ID: c.ID, SubscriptionID: c.SubscriptionID, PeriodKey: c.PeriodKey, Key: c.Key(),
		Amount: c.Amount, Currency: c.Currency, Gateway: c.Gateway, Status: string(c.Status),
		AttemptCount: c.AttemptCount, NextAttemptAt: utcPtr(c.NextAttemptAt), FailureCode: optional(c.FailureCode),
		ReviewReason: optional(c.ReviewReason), CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

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
