package notify

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pg"
)

// ObjectHistory returns the events about objectID whose type begins with
// prefix ("charge."), oldest first, at most limit: an object's history as
// its events recorded it, each holding the object as that change left it
// (the support console's attempts of a charge).
func ObjectHistory(ctx context.Context, db pg.DBTX, objectID uuid.UUID, prefix string, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE object_id = $1 AND starts_with(type, $2) ORDER BY id LIMIT $3`, objectID, prefix, limit)
	if err != nil {
		return nil, fmt.Errorf("object history: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("object history: %w", err)
	}
	return events, nil
}
