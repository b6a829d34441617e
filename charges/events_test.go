package charges_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/notify"
)

// events is the sink of every pipeline test's store: notify's recorder,
// into the test's database (it holds no state), so that requireOutcome
// checks the events of each step.
var events = &notify.Recorder{}

var publishedStatus = map[charges.Status]bool{charges.Succeeded: true, charges.Declined: true, charges.Failed: true,
	charges.RequiresReview: true, charges.Voided: true}

// requireEvents checks that a step that moved the charge from its fixture
// status to a published one wrote that event exactly once, and that no type
// repeats within a step. (A step may pass through a published status and
// come back: a decline after a card change in flight is charge.declined,
// then a new attempt, scheduled again.)
func (b *testBundle) requireEvents(ctx context.Context, t *testing.T, id uuid.UUID, status charges.Status) {
	t.Helper()
	rows, err := b.pool.Query(ctx, `SELECT type FROM events WHERE object_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	seen := map[string]int{}
	for _, typ := range types {
		seen[typ]++
		require.Equal(t, 1, seen[typ], "event %s written twice: %v", typ, types)
	}
	if status != b.fixtures[id] && publishedStatus[status] {
		require.Equal(t, 1, seen["charge."+string(status)], "charge.%s in %v", status, types)
	}
}

// Resolving writes charge.resolved only, once.
func TestResolvePublishesResolvedOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{status: charges.RequiresReview, reviewReason: "lost"})
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.Resolve(ctx, tx, c.ID, charges.Resolution{Outcome: charges.Succeeded, Evidence: "ledger", Actor: "support"}, b.clock.Now())
		return err
	}))
	var types []string
	rows, err := b.pool.Query(ctx, `SELECT type FROM events WHERE object_id = $1`, c.ID)
	require.NoError(t, err)
	types, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"charge.resolved"}, types)
	var parent uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT parent_id FROM events WHERE object_id = $1`, c.ID).Scan(&parent))
	require.Equal(t, b.subscriptionID, parent)
}
