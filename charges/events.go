package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventSink receives every published change of a charge, in the
// transaction that makes it, with the charge as it is after the change.
// notify implements it (the event log and its webhooks); an error rolls
// the change back.
type EventSink interface {
	ChargeChanged(ctx context.Context, tx pgx.Tx, eventType string, c Charge, at time.Time) error
	// RefundChanged receives a refund's events (eventType "created",
	// "succeeded", "failed"), with the refund as it is after the change.
	RefundChanged(ctx context.Context, tx pgx.Tx, eventType string, r Refund, at time.Time) error
}

// EventRefunded is the charge's event of its last refund: all it captured
// is returned. The charge keeps its status (succeeded).
const EventRefunded = "refunded"

// The events of a refund, published as refund.<type>.
const (
	EventRefundCreated   = "created"
	EventRefundSucceeded = "succeeded"
	EventRefundFailed    = "failed"
)

// refundEvents are the refund statuses whose reaching is an event; the
// moves between pending and unknown are internal.
var refundEvents = map[RefundStatus]string{RefundSucceeded: EventRefundSucceeded, RefundFailed: EventRefundFailed}

// publishRefund sends a refund's event in tx, the transaction of its
// change.
func (s *Store) publishRefund(ctx context.Context, tx pgx.Tx, eventType string, r Refund, at time.Time) error {
	if s == nil || s.Events == nil {
		return nil
	}
	if err := s.Events.RefundChanged(ctx, tx, eventType, r, at); err != nil {
		return fmt.Errorf("publish refund.%s: %w", eventType, err)
	}
	return nil
}

// EventResolved is the event of a person's resolution of a charge in
// review; it is published instead of succeeded or failed.
const EventResolved = "resolved"

// published are the statuses whose reaching is an event, named as the
// status. Reaching any other (scheduled, authorizing...) is internal.
var published = map[Status]bool{Succeeded: true, Declined: true, Failed: true, RequiresReview: true, Voided: true}

// publish sends the event of c reaching its status (eventType "" names it
// after the status) if that is a published one. db must be the
// transaction of the change.
func (s *Store) publish(ctx context.Context, db DBTX, eventType string, c Charge, at time.Time) error {
	if eventType == "" {
		if !published[c.Status] {
			return nil
		}
		eventType = string(c.Status)
	}
	if s == nil || s.Events == nil {
		return nil
	}
	tx, ok := db.(pgx.Tx)
	if !ok {
		return fmt.Errorf("charge %s moved to %s outside a transaction: its event cannot be written with it", c.ID, c.Status)
	}
	if err := s.Events.ChargeChanged(ctx, tx, eventType, c, at); err != nil {
		return fmt.Errorf("publish charge.%s: %w", eventType, err)
	}
	return nil
}
