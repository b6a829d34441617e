package charges

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
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

	batches := (&Pipeline{Pool: pool, Clock: clock.Wall{}}).batched()
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
	batches := (&Pipeline{Pool: pool, Clock: clock.Wall{}}).batched()
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

// lockingOwners is Subscriptions that locks many at once, recording what
// it was asked.
type lockingOwners struct {
	mu     sync.Mutex
	locked [][]uuid.UUID
	paid   []uuid.UUID
	// recovering owners are past due: a paid charge may change them.
	recovering map[uuid.UUID]bool
}

func (o *lockingOwners) Lock(context.Context, pgx.Tx, uuid.UUID) (OwnerState, error) {
	return OwnerState{}, errors.New("locked one by one")
}

func (o *lockingOwners) LockMany(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]OwnerState, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.locked = append(o.locked, ids)
	out := map[uuid.UUID]OwnerState{}
	for _, id := range ids {
		out[id] = OwnerState{PaidChangesNothing: !o.recovering[id]}
	}
	return out, nil
}

func (o *lockingOwners) ChargePaid(_ context.Context, _ pgx.Tx, c Charge, _ bool) (*time.Time, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.paid = append(o.paid, c.ID)
	return nil, nil
}

func (o *lockingOwners) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error { return nil }
func (o *lockingOwners) ChargeFailed(context.Context, pgx.Tx, Charge) (*time.Time, error) {
	return nil, nil
}

// Captures recorded together lock their subscriptions first, all in one
// statement and in the order of their ids; each charge capturing for its
// attempt succeeds, any other is left as it was; and only a subscription
// the payment can change (past due) is told of it.
func TestBatchedCapturesLockOwnersInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	var batch []*guardedMove
	owners := &lockingOwners{recovering: map[uuid.UUID]bool{}}
	want := map[uuid.UUID]Status{}
	for i, kind := range []string{"capturing", "capturing", "recovering", "other_attempt", "settled"} {
		id := insertCharge(ctx, t, pool, fmt.Sprintf("captured-%d", i), kind)
		var owner uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT subscription_id FROM charges WHERE id = $1`, id).Scan(&owner))
		status := Succeeded
		switch kind {
		case "capturing", "recovering":
			_, err := pool.Exec(ctx, `UPDATE charges SET status = $2 WHERE id = $1`, id, string(Capturing))
			require.NoError(t, err)
			owners.recovering[owner] = kind == "recovering"
		case "other_attempt":
			_, err := pool.Exec(ctx, `UPDATE charges SET status = $2 WHERE id = $1`, id, string(Capturing))
			require.NoError(t, err)
			status = Capturing
		}
		want[id] = status
		batch = append(batch, &guardedMove{id: id, attempt: 1, owner: owner, done: make(chan struct{})})
	}
	p := &Pipeline{Pool: pool, Clock: clock.Wall{}, Owners: Owners{Subscriptions: owners}}
	p.batched().captured.run(ctx, batch)

	for _, m := range batch {
		if want[m.id] == Succeeded && m.err == nil {
			require.Equal(t, Succeeded, m.charge.Status)
		}
	}
	after := snapshot(ctx, t, pool)
	for id, status := range want {
		require.Equal(t, status, after[id].Status)
	}
	require.ErrorIs(t, batch[3].err, ErrStale, "another attempt's charge")
	require.ErrorIs(t, batch[4].err, ErrStale, "a charge already settled")
	require.Len(t, owners.locked, 1, "one statement locks them all")
	require.True(t, slices.IsSortedFunc(owners.locked[0], func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }))
	require.Len(t, owners.locked[0], len(batch))
	require.Equal(t, []uuid.UUID{batch[2].id}, owners.paid, "only the past-due subscription hears of its payment")
}

// A batch whose statement panics answers every run in it with an error,
// and the runs queued behind it still get their own batch.
func TestBatchThatPanicsAnswersEveryRun(t *testing.T) {
	t.Parallel()
	var calls int
	b := &moveBatcher{send: func(_ context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
		calls++
		if calls == 1 {
			panic("boom")
		}
		moved := map[uuid.UUID]Charge{}
		for _, m := range batch {
			moved[m.id] = Charge{ID: m.id, AttemptCount: 1}
		}
		return moved, nil
	}}
	_, err := b.do(context.Background(), &guardedMove{id: uuid.New(), attempt: 1})
	require.ErrorContains(t, err, "panicked")
	id := uuid.New()
	c, err := b.do(context.Background(), &guardedMove{id: id, attempt: 1})
	require.NoError(t, err)
	require.Equal(t, id, c.ID)
}

// Both statements that start an attempt, the per-charge one and the
// batched one, price it alike: in full from the last discounted start on,
// at the discount before it.
func TestBothAttemptStartStatementsPriceInFullFromTheLastDiscountedStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	p := &Pipeline{Pool: pool, Clock: clock.Wall{}}
	now := p.Clock.Now()
	for _, tc := range []struct {
		left time.Duration // of the discount when the attempt starts
		want int64
	}{{30 * time.Minute, 3980}, {PostingDiscountMargin, 3980}, {PostingDiscountMargin + time.Minute, 1990}} {
		for _, batched := range []bool{false, true} {
			id := insertCharge(ctx, t, pool, fmt.Sprintf("%s-%t", tc.left, batched), "wanted")
			_, err := pool.Exec(ctx, `UPDATE charges SET full_amount = 3980, discount_until = $2 WHERE id = $1`, id, now.Add(tc.left))
			require.NoError(t, err)
			var c Charge
			if batched {
				c, err = p.batched().authorizing.do(ctx, &guardedMove{id: id, attempt: 1})
			} else {
				at := p.Clock.Now()
				c, err = oneMoved(p.Store.move(ctx, pool, p.beginning(authorizeFrom, Authorizing), at, byID(id, 1, ""), at, string(Scheduled)))
			}
			require.NoError(t, err)
			require.Equal(t, Authorizing, c.Status)
			require.Equal(t, tc.want, c.Amount, "%s of the discount left, batched: %t", tc.left, batched)
		}
	}
}
