package api

import (
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
)

type createAPIKeyRequest struct {
	Role       string `json:"role"`
	CustomerID string `json:"customer_id"`
}

func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request) {
	var req createAPIKeyRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var errs fieldErrors
	role, err := ParseRole(req.Role)
	if err != nil {
		errs.add("role", "must be one of admin, support, customer")
	}
	switch {
	case role == RoleCustomer && (req.CustomerID == "" || len(req.CustomerID) > maxCustomerID || !printableASCII(req.CustomerID)):
		errs.add("customer_id", "is required for the customer role: 1..%d printable ASCII characters", maxCustomerID)
	case role != RoleCustomer && req.CustomerID != "":
		errs.add("customer_id", "is only allowed for the customer role")
	}
	if len(errs) > 0 {
		writeProblem(w, validationProblem(errs...))
		return
	}
	tx, ok := requestTx(w, r)
	if !ok {
		return
	}
	key, err := CreateKey(r.Context(), tx, role, req.CustomerID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The key is shown once: the idempotency record keeps, and a replay
	// returns, the object without it (API.md), so no usable key is stored.
	shown := key
	shown.Key = ""
	replay, err := encodeJSON(shown)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	idempotency.ReplayBody(r.Context(), replay)
	writeJSON(w, http.StatusCreated, key)
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }

// requestTx is the transaction a POST executes in (see package
// idempotency); it writes the 500 itself when the middleware is missing.
func requestTx(w http.ResponseWriter, r *http.Request) (pgx.Tx, bool) {
	tx, ok := idempotency.Tx(r.Context())
	if !ok {
		writeProblem(w, problemInternal)
	}
	return tx, ok
}
