package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
)

type webhookEndpointJSON struct {
	ID          uuid.UUID `json:"id"`
	URL         string    `json:"url"`
	Events      []string  `json:"events"`
	Description *string   `json:"description"`
	Status      string    `json:"status"`
	// Secret is shown once, in the first answer to the creation or roll.
	Secret                  string     `json:"secret,omitempty"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	CreatedAt               time.Time  `json:"created_at"`
	UpdatedAt               time.Time  `json:"updated_at"`
}

func toWebhookEndpointJSON(e notify.Endpoint) webhookEndpointJSON {
	return webhookEndpointJSON{ID: e.ID, URL: e.URL, Events: e.Events, Description: optional(e.Description),
		Status: e.Status, PreviousSecretExpiresAt: e.PreviousSecretExpiresAt, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

type deliveryJSON struct {
	EventID       string     `json:"event_id"`
	Attempt       int        `json:"attempt"`
	Outcome       string     `json:"outcome"`
	StatusCode    *int       `json:"status_code"`
	Error         *string    `json:"error"`
	DurationMS    int64      `json:"duration_ms"`
	At            time.Time  `json:"at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

func toDeliveryJSON(a notify.Attempt) deliveryJSON {
	return deliveryJSON{EventID: notify.FormatID(a.EventID), Attempt: a.Attempt, Outcome: a.Outcome, StatusCode: a.StatusCode,
		Error: optional(a.Error), DurationMS: a.DurationMS, At: a.At, NextAttemptAt: a.NextAttemptAt}
}

type createWebhookEndpointRequest struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
}

func (s *Server) createWebhookEndpoint(w http.ResponseWriter, r *http.Request) {
	var req createWebhookEndpointRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	ep, secret, err := s.Webhooks.Create(r.Context(), tx, req.URL, req.Events, req.Description)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeSecretOnce(w, r, http.StatusCreated, ep, secret)
}

// writeSecretOnce answers with the endpoint and its new secret, while the
// idempotency record keeps, and a replay returns, the endpoint without it
// (the OpenAPI document: a secret is shown once).
func (s *Server) writeSecretOnce(w http.ResponseWriter, r *http.Request, status int, ep notify.Endpoint, secret string) {
	shown := toWebhookEndpointJSON(ep)
	replay, err := encodeJSON(shown)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	idempotency.ReplayBody(r.Context(), replay)
	shown.Secret = secret
	writeJSON(w, status, shown)
}

func (s *Server) listWebhookEndpoints(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, idCursor, func(before uuid.UUID, limit int) ([]notify.Endpoint, error) {
		return s.Webhooks.Endpoints(r.Context(), before, limit)
	}, toWebhookEndpointJSON, func(e notify.Endpoint) string { return e.ID.String() })
}

func (s *Server) getWebhookEndpoint(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ep, err := s.Webhooks.Endpoint(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWebhookEndpointJSON(ep))
}

func (s *Server) setWebhookEndpointStatus(status string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		change(s, w, r, toWebhookEndpointJSON, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (notify.Endpoint, error) {
			return s.Webhooks.SetStatus(r.Context(), tx, id, status)
		})
	}
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, seqCursor(1), underPath(r, func(id uuid.UUID, before int64, limit int) ([]notify.Attempt, error) {
		return s.Webhooks.Attempts(r.Context(), id, before, limit)
	}), toDeliveryJSON, func(a notify.Attempt) string { return strconv.FormatInt(a.ID, 10) })
}

type redeliverRequest struct {
	EventID string `json:"event_id"`
}

type redeliveryJSON struct {
	EventID    string    `json:"event_id"`
	EndpointID uuid.UUID `json:"endpoint_id"`
}

func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	var req redeliverRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.EventID == "" {
		s.fail(w, r, rebilltype.Errors{{Field: "event_id", Message: "is required: the id of the event to deliver again"}})
		return
	}
	eventID, ok := notify.ParseID(req.EventID)
	if !ok {
		s.fail(w, r, notify.ErrNotFound)
		return
	}
	if err := s.Webhooks.Redeliver(r.Context(), tx, id, eventID); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, redeliveryJSON{EventID: notify.FormatID(eventID), EndpointID: id})
}
