package subscriptions

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/rebill/rebill/platform/pg"
)

// InExperiment returns the ids of the subscriptions whose record names the
// experiment key, and how many each of its arms holds. The condition
// repeats the predicate of the partial index subscriptions_experiments, so
// that the planner reads only the subscriptions in an experiment.
func InExperiment(ctx context.Context, db pg.DBTX, key string) ([]uuid.UUID, map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT id, experiments->>$1 FROM subscriptions
		WHERE experiments <> '{}' AND experiments ? $1`, key)
	if err != nil {
		return nil, nil, fmt.Errorf("subscriptions in experiment %s: %w", key, err)
	}
	defer rows.Close()
	var ids []uuid.UUID
	byArm := map[string]int64{}
	for rows.Next() {
		var id uuid.UUID
		var arm string
		if err := rows.Scan(&id, &arm); err != nil {
			return nil, nil, fmt.Errorf("subscriptions in experiment %s: %w", key, err)
		}
		ids = append(ids, id)
		byArm[arm]++
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("subscriptions in experiment %s: %w", key, err)
	}
	return ids, byArm, nil
}
