package usecases

import (
	"context"

	"github.com/google/uuid"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/rebilltype"
)

// PublishedEvents lists the published event log newest first: a customer key sees
// its own customer's events only. Returns rebilltype.Errors for an unknown
// type.
func (s *Service) PublishedEvents(ctx context.Context, c Caller, p notify.ListParams) ([]notify.Event, error) {
	if p.Type != "" && !notify.KnownType(p.Type) {
		return nil, rebilltype.Errors{{Field: "type", Message: "is not a known event type"}}
	}
	p.CustomerID = c.CustomerID
	return notify.ListEvents(ctx, s.Pool, p)
}

// PublishedEvent returns one event. Returns notify.ErrNotFound for an event that
// does not exist or that the caller may not see.
func (s *Service) PublishedEvent(ctx context.Context, c Caller, id uuid.UUID) (notify.Event, error) {
	return notify.GetEvent(ctx, s.Pool, id, c.CustomerID)
}
