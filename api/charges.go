package api

import (
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
)

const maxEvidence = 2000

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

func chargeList(cs []charges.Charge, limit int, cursor func(charges.Charge) string) listJSON[chargeJSON] {
	out := listJSON[chargeJSON]{Data: []chargeJSON{}}
	for i, c := range cs {
		if i == limit {
			out.NextCursor = encodeCursor(cursor(cs[i-1]))
			break
		}
		out.Data = append(out.Data, toChargeJSON(c))
	}
	return out
}

func (s *Server) listSubscriptionCharges(w http.ResponseWriter, r *http.Request) {
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	var before uuid.UUID
	if cursor != "" {
		id, err := parseID(cursor)
		if err != nil {
			writeProblem(w, fieldProblem("cursor", "is not a cursor this API returned"))
			return
		}
		before = id
	}
	sub, ok := s.loadVisible(w, r, s.Pool)
	if !ok {
		return
	}
	cs, err := charges.ListBySubscription(r.Context(), s.Pool, sub.ID, before, limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, chargeList(cs, limit, func(c charges.Charge) string { return c.ID.String() }))
}

// loadVisibleCharge reads a charge whose subscription the principal may
// see; it writes the 404 itself.
func (s *Server) loadVisibleCharge(w http.ResponseWriter, r *http.Request, db charges.DBTX) (charges.Charge, bool) {
	id, err := parseID(chi.URLParam(r, "id"))
	if err != nil {
		writeProblem(w, problemNotFound)
		return charges.Charge{}, false
	}
	c, err := charges.Get(r.Context(), db, id)
	if err == nil && !principalFrom(r.Context()).canSee(c.CustomerID) {
		err = charges.ErrNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return charges.Charge{}, false
	}
	return c, true
}

func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	if c, ok := s.loadVisibleCharge(w, r, s.Pool); ok {
		writeJSON(w, http.StatusOK, toChargeJSON(c))
	}
}

func (s *Server) reviewQueue(w http.ResponseWriter, r *http.Request) {
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	var after *charges.ReviewCursor
	if cursor != "" {
		c, err := charges.ParseReviewCursor(cursor)
		if err != nil {
			writeProblem(w, fieldProblem("cursor", "is not a cursor this API returned"))
			return
		}
		after = &c
	}
	cs, err := charges.ReviewQueue(r.Context(), s.Pool, after, limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, chargeList(cs, limit, func(c charges.Charge) string {
		return charges.ReviewCursor{UpdatedAt: c.UpdatedAt, ID: c.ID}.String()
	}))
}

type resolveRequest struct {
	Outcome  string `json:"outcome"`
	Evidence string `json:"evidence"`
}

func (s *Server) resolveCharge(w http.ResponseWriter, r *http.Request) {
	var req resolveRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var errs fieldErrors
	outcome := charges.Status(req.Outcome)
	if outcome != charges.Succeeded && outcome != charges.Failed {
		errs.add("outcome", "must be succeeded or failed")
	}
	if strings.TrimSpace(req.Evidence) == "" || utf8.RuneCountInString(req.Evidence) > maxEvidence {
		errs.add("evidence", "is required: 1..%d characters naming the provider's record", maxEvidence)
	}
	if len(errs) > 0 {
		writeProblem(w, validationProblem(errs...))
		return
	}
	tx, c, ok := s.chargeInRequestTx(w, r)
	if !ok {
		return
	}
	p := principalFrom(r.Context())
	resolved, err := s.Billing.Resolve(r.Context(), tx, c.ID, charges.Resolution{
		Outcome: outcome, Evidence: req.Evidence, Actor: string(p.Role) + ":" + p.KeyID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toChargeJSON(resolved))
}

func (s *Server) retryCharge(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if !decodeBody(w, r, &req) {
		return
	}
	tx, c, ok := s.chargeInRequestTx(w, r)
	if !ok {
		return
	}
	retried, err := s.Billing.Retry(r.Context(), tx, c.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toChargeJSON(retried))
}

// chargeInRequestTx reads the charge a POST is about, inside the request's
// transaction; it writes the error itself.
func (s *Server) chargeInRequestTx(w http.ResponseWriter, r *http.Request) (pgx.Tx, charges.Charge, bool) {
	tx, ok := requestTx(w, r)
	if !ok {
		return nil, charges.Charge{}, false
	}
	c, ok := s.loadVisibleCharge(w, r, tx)
	return tx, c, ok
}
