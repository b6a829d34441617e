package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
)

var errUnknownObjectID = rebilltype.Errors{{Field: "object_id", Message: "must be an object id (a UUID)"}}

// notifyEventJSON is an event of the published log (GET /v1/events), the
// same body a webhook delivers.
type notifyEventJSON = notify.Body

func toNotifyEventJSON(e notify.Event) notifyEventJSON { return e.Body() }

func (s *Server) listPublishedEvents(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, notify.ParseID, func(before uuid.UUID, limit int) ([]notify.Event, error) {
		p := notify.ListParams{Type: r.URL.Query().Get("type"), Before: before, Limit: limit}
		if v := r.URL.Query().Get("object_id"); v != "" {
			id, err := uuid.Parse(v)
			if err != nil {
				return nil, errUnknownObjectID
			}
			p.ObjectID = id
		}
		return s.Billing.PublishedEvents(r.Context(), callerFrom(r), p)
	}, toNotifyEventJSON, notify.Event.PublicID)
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
