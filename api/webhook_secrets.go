package api

import (
	"net/http"
	"time"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
)

type rollWebhookSecretRequest struct {
	// ExpiresIn is how long the replaced secret keeps signing, a Go
	// duration ("24h", "90m", "0s"); absent: notify.DefaultKeepOld.
	ExpiresIn *string `json:"expires_in"`
}

func (s *Server) rollWebhookSecret(w http.ResponseWriter, r *http.Request) {
	var req rollWebhookSecretRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	keepOld := notify.DefaultKeepOld
	if req.ExpiresIn != nil {
		if keepOld, err = time.ParseDuration(*req.ExpiresIn); err != nil {
			s.fail(w, r, rebilltype.Errors{{Field: "expires_in", Message: `must be a duration from 0s to 168h (7 days), e.g. "24h"`}})
			return
		}
	}
	ep, secret, err := s.Webhooks.RollSecret(r.Context(), tx, id, keepOld)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeSecretOnce(w, r, http.StatusOK, ep, secret)
}
