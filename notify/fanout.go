package notify

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Queue is the River queue of webhook deliveries: its own, with its own
// bounded workers, so that slow receivers never hold up billing.
const Queue = "webhooks"

// deliveryMaxAttempts bounds River's attempts far above what three days
// of backoff use: the worker gives up by age (GiveUpAfter), not by count.
const deliveryMaxAttempts = 1000

// DeliverArgs is one delivery of an event to an endpoint.
type DeliverArgs struct {
	EventID    uuid.UUID `json:"event_id"`
	EndpointID uuid.UUID `json:"endpoint_id"`
}

// Kind is the River job kind.
func (DeliverArgs) Kind() string { return "webhook_deliver" }

// InsertOpts puts deliveries on their queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: deliveryMaxAttempts}
}

// Enqueuer inserts jobs in a transaction; *river.Client[pgx.Tx] is one.
type Enqueuer interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// fanOut queues one delivery of the event per endpoint, in the event's
// transaction: no event without its deliveries. endpoints are the enabled
// ones subscribed to typ when the event was written (Recorder.Record reads
// them in the event's statement), so an endpoint disabled by then gets
// nothing of it, ever.
func fanOut(ctx context.Context, tx pgx.Tx, enq Enqueuer, eventID uuid.UUID, typ string, endpoints []uuid.UUID) error {
	if enq == nil || len(endpoints) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(endpoints))
	for i, id := range endpoints {
		params[i] = river.InsertManyParams{Args: DeliverArgs{EventID: eventID, EndpointID: id}}
	}
	if _, err := enq.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("queue %s deliveries: %w", typ, err)
	}
	return nil
}
