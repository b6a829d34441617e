package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/rebill/rebill/internal/validate"
	"github.com/rebill/rebill/notify"
)

var errUnknownObjectID = validate.Errors{{Field: "object_id", Message: "must be an object id (a UUID)"}}

// notifyEventJSON is an event of the published log (GET /v1/events), the
// same body a webhook delivers.
type notifyEventJSON = notify.Body

func toNotifyEventJSON(e notify.Event) notifyEventJSON { return e.Body() }

func (s *Server) listPublishedEvents(w http.ResponseWriter, r *http.Request) {
	pg, err := pageParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p := notify.ListParams{Type: r.URL.Query().Get("type"), Limit: pg.limit + 1}
	if pg.cursor != "" {
		id, ok := notify.ParseID(pg.cursor)
		if !ok {
			s.fail(w, r, errBadCursor)
			return
		}
		p.Before = id
	}
	if v := r.URL.Query().Get("object_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			s.fail(w, r, errUnknownObjectID)
			return
		}
		p.ObjectID = id
	}
	events, err := s.Billing.PublishedEvents(r.Context(), callerFrom(r), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list(events, pg.limit, toNotifyEventJSON, notify.Event.PublicID))
}

func (s *Server) getPublishedEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := notify.ParseID(chi.URLParam(r, "id"))
	if !ok {
		s.fail(w, r, notify.ErrNotFound)
		return
	}
	e, err := s.Billing.PublishedEvent(r.Context(), callerFrom(r), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toNotifyEventJSON(e))
}
