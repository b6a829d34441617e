package charges

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/dbtest"
)

// Runs that move charges at the same time share statements, and each
// charge still gets what its own guarded UPDATE would have given it: the
// charges whose guard holds are moved, and in the same statements a
// charge whose cancel asked for a void, one of another attempt and one no
// longer scheduled are left exactly as they were.
func TestBatchedMovesKeepEachChargesGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	const perKind = 30
	kinds := []string{"wanted", "void_requested", "other_attempt", "settled"}
	ids := map[string][]uuid.UUID{}
	for _, kind := range kinds {
		for i := range perKind {
			ids[kind] = append(ids[kind], insertCharge(ctx, t, pool, fmt.Sprintf("%s-%d", kind, i), kind))
		}
	}
	before := snapshot(ctx, t, pool)

	batches := newPipelineBatches(pool, clock.Wall{})
	var mu sync.Mutex
	var sizes []int
	send := batches.authorizing.send
	batches.authorizing.send = func(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a statement takes time: moves arriving meanwhile queue up
		return send(ctx, batch)
	}
	results := map[uuid.UUID]error{}
	var wg sync.WaitGroup
	for _, kind := range kinds {
		for _, id := range ids[kind] {
			wg.Go(func() {
				c, err := batches.authorizing.do(ctx, &guardedMove{id: id, attempt: 1})
				if err == nil && c.ID != id {
					err = fmt.Errorf("got charge %s", c.ID)
				}
				mu.Lock()
				results[id] = err
				mu.Unlock()
			})
		}
	}
	wg.Wait()

	total := 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, len(kinds)*perKind, total, "every move was sent once")
	require.Less(t, len(sizes), total/2, "moves shared statements: %v", sizes)
	after := snapshot(ctx, t, pool)
	for _, kind := range kinds {
		for _, id := range ids[kind] {
			if kind == "wanted" {
				require.NoError(t, results[id])
				require.Equal(t, Authorizing, after[id].Status, "a wanted charge moved")
				continue
			}
			require.ErrorIs(t, results[id], ErrStale, "%s", kind)
			require.Equal(t, before[id], after[id], "a %s charge is left as it was", kind)
		}
	}
}

// Two runs of one charge's step in the same statement (a rescued job and
// its rerun) both learn that the charge is authorizing: as with two
// statements, where the second finds it authorizing already.
func TestBatchedMovesOfOneChargeTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	id := insertCharge(ctx, t, pool, "twice", "wanted")
	batches := newPipelineBatches(pool, clock.Wall{})
	batch := []*guardedMove{{id: id, attempt: 1}, {id: id, attempt: 1}, {id: id, attempt: 2}}
	for _, m := range batch {
		m.done = make(chan struct{})
	}
	batches.authorizing.run(ctx, batch)
	require.NoError(t, batch[0].err)
	require.NoError(t, batch[1].err)
	require.Equal(t, Authorizing, batch[0].charge.Status)
	require.Equal(t, Authorizing, batch[1].charge.Status)
	require.ErrorIs(t, batch[2].err, ErrStale, "another attempt's run")
}

// insertCharge inserts a charge of a subscription of its own: scheduled,
// attempt 1, unless kind says otherwise.
func insertCharge(ctx context.Context, t *testing.T, pool DBTX, key, kind string) uuid.UUID {
	t.Helper()
	sub, id := uuid.New(), uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_period_index, next_charge_at, pm_gateway, pm_token,
			pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, $2, 'active', 1990, 'USD', 'month', 1, 'UTC', now(), 1, now(), 'sim1', 'tok_ok', 12, 2035, now(), now())`,
		sub, "cus-"+key)
	require.NoError(t, err)
	status, attempt, void := Scheduled, 1, false
	switch kind {
	case "void_requested":
		void = true
	case "other_attempt":
		attempt = 2
	case "settled":
		status = Succeeded
	}
	_, err = pool.Exec(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount,
			currency, gateway, pm_token, status, attempt_count, void_requested, created_at, updated_at, attempt_due_at)
		VALUES ($1, $2, $3, '2026-12', now(), 1990, 'USD', 'sim1', 'tok_ok', $4, $5, $6, now(), now(), now())`,
		id, sub, "cus-"+key, string(status), attempt, void)
	require.NoError(t, err)
	return id
}

// snapshot is every charge as stored.
func snapshot(ctx context.Context, t *testing.T, pool DBTX) map[uuid.UUID]Charge {
	t.Helper()
	cs, err := collect(pool.Query(ctx, `SELECT `+columns+` FROM charges`))
	require.NoError(t, err)
	out := map[uuid.UUID]Charge{}
	for _, c := range cs {
		out[c.ID] = c
	}
	return out
}
