package api

import (
	"net/http"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apikeys"
)

type createAPIKeyRequest struct {
	Role       string `json:"role"`
	CustomerID string `json:"customer_id"`
}

// CreatedKey is the answer to a key's creation; Key is shown once and never
// stored (a replay of its creation returns the object without it).
type CreatedKey struct {
	ID         string       `json:"id"`
	Key        string       `json:"key,omitempty"`
	Role       apikeys.Role `json:"role"`
	CustomerID string       `json:"customer_id,omitempty"`
}

func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request) {
	var req createAPIKeyRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	created, err := s.Keys.Create(r.Context(), tx, req.Role, req.CustomerID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	shown := CreatedKey{ID: created.ID, Role: created.Role, CustomerID: created.CustomerID}
	// The idempotency record keeps, and a replay returns, the object
	// without the key (the OpenAPI document, decision 14), so no usable key is stored.
	replay, err := encodeJSON(shown)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	idempotency.ReplayBody(r.Context(), replay)
	shown.Key = created.Secret
	writeJSON(w, http.StatusCreated, shown)
}
