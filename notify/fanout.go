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

// fanOut queues one delivery per enabled endpoint subscribed to typ, in
// the event's transaction: no event without its deliveries, and an
// endpoint disabled now gets nothing of it, ever.
func fanOut(ctx context.Context, tx pgx.Tx, enq Enqueuer, eventID uuid.UUID, typ string) error {
	if enq == nil {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT id FROM webhook_endpoints
		WHERE status = 'enabled' AND (events @> ARRAY[$1] OR events @> ARRAY['*'])`, typ)
	if err != nil {
		return fmt.Errorf("find endpoints for %s: %w", typ, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("find endpoints for %s: %w", typ, err)
	}
	if len(ids) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: DeliverArgs{EventID: eventID, EndpointID: id}}
	}
	if _, err := enq.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("queue %s deliveries: %w", typ, err)
	}
	return nil
}
