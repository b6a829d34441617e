package migrations_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/testkit/dbtest"
)

var (
	inFlight = []charges.Status{charges.Scheduled, charges.Authorizing, charges.Authorized, charges.Capturing, charges.Unknown}
	offPath  = []charges.Status{charges.Unknown, charges.RequiresReview, charges.Declined, charges.Voided, charges.Failed}
	settled  = []charges.Status{charges.Succeeded, charges.Failed, charges.Voided, charges.Declined}
)

// derived are the columns the charges trigger keeps from status.
type derived struct {
	InFlight      *bool
	OffPathStatus *string
	OffPathAt     *time.Time
	SettledAt     *time.Time
}

// want is what the trigger must leave on a charge in status that entered
// it at entered.
func want(status charges.Status, entered time.Time) derived {
	var d derived
	if slices.Contains(inFlight, status) {
		d.InFlight = new(true)
	}
	if slices.Contains(offPath, status) {
		d.OffPathStatus, d.OffPathAt = new(string(status)), new(entered)
	}
	if slices.Contains(settled, status) {
		d.SettledAt = new(entered)
	}
	return d
}

func readDerived(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID) derived {
	t.Helper()
	var d derived
	require.NoError(t, pool.QueryRow(ctx, `SELECT in_flight, off_path_status, off_path_at, settled_at FROM charges WHERE id = $1`, id).
		Scan(&d.InFlight, &d.OffPathStatus, &d.OffPathAt, &d.SettledAt))
	for _, at := range []*time.Time{d.OffPathAt, d.SettledAt} {
		if at != nil {
			*at = at.UTC()
		}
	}
	return d
}

// insertCharge inserts a charge of a new subscription in status, last
// changed at updatedAt, with SQL that names none of the derived columns.
func insertCharge(ctx context.Context, t *testing.T, pool *pgxpool.Pool, status charges.Status, updatedAt time.Time, identity string) uuid.UUID {
	t.Helper()
	sub, id := uuid.New(), uuid.Must(uuid.NewV7())
	_, err := pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cus_1', 'active', 1999, 'EUR', 'month', 1, 'UTC', $2, $2, 'sim1', 't', 12, 2030, $2, $2)`, sub, updatedAt)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount, currency,
			gateway, pm_token, status, next_attempt_at, created_at, updated_at, attempt_due_at, bill_identity, identity_held)
		VALUES ($1, $2, 'cus_1', '2026-12', $3::timestamptz, 1999, 'EUR', 'sim1', 't', $4, CASE WHEN $4 = $5 THEN $3::timestamptz END, $3, $3, $3,
			NULLIF($6, ''), $6 <> '')`,
		id, sub, updatedAt, string(status), string(charges.Declined), identity)
	require.NoError(t, err)
	return id
}

// The trigger derives the columns from status on insert and on every
// move, from each status to each (staying included): times are those of
// entering the current status, kept while a change leaves it.
func TestChargeLayoutTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	for _, from := range charges.Statuses {
		for _, to := range charges.Statuses {
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				id := insertCharge(ctx, t, pool, from, t0, "")
				require.Equal(t, want(from, t0), readDerived(ctx, t, pool, id), "inserted")
				_, err := pool.Exec(ctx, `UPDATE charges SET status = $2, updated_at = $3,
						next_attempt_at = CASE WHEN $2 = $4 THEN $3::timestamptz END WHERE id = $1`,
					id, string(to), t1, string(charges.Declined))
				require.NoError(t, err)
				entered := t1
				if from == to {
					entered = t0
				}
				require.Equal(t, want(to, entered), readDerived(ctx, t, pool, id), "moved")
			})
		}
	}
}

// A database migrated from empty has no settled charge of before the
// trigger: the layout is done at once.
func TestChargeLayoutDoneOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	var done bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT settled_backfilled FROM charges_layout`).Scan(&done))
	require.True(t, done)
	more, err := charges.FillSettled(ctx, pool, 0, 1)
	require.NoError(t, err)
	require.False(t, more)
}

// Charges of every status that exist before the migration: the few in
// flight, in review, in dunning or able to release an identity get their
// columns at migration; the settled ones are found by the day's window
// (by updated_at) until the layout job has filled them, and by settled_at
// after, when the job has marked the table done.
func TestChargeLayoutOfExistingCharges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 19)
	require.NoError(t, err)

	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := day.Add(10 * time.Hour)
	ids := map[charges.Status]uuid.UUID{}
	for _, s := range charges.Statuses {
		ids[s] = insertCharge(ctx, t, pool, s, at, "")
	}
	heldVoided := insertCharge(ctx, t, pool, charges.Voided, at, "id-voided")
	heldFailed := insertCharge(ctx, t, pool, charges.Failed, at, "id-failed")
	for range 7 { // more than a batch of the job below
		insertCharge(ctx, t, pool, charges.Succeeded, at, "")
	}

	require.NoError(t, migrations.Up(ctx, pool))
	for s, id := range ids {
		got := readDerived(ctx, t, pool, id)
		w := want(s, at)
		if s == charges.Succeeded || s == charges.Failed || s == charges.Voided {
			w = derived{} // history: the job fills them
		}
		require.Equal(t, w, got, "%s after the migration", s)
	}
	require.Equal(t, want(charges.Voided, at), readDerived(ctx, t, pool, heldVoided))
	require.Equal(t, want(charges.Failed, at), readDerived(ctx, t, pool, heldFailed))
	var done bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT settled_backfilled FROM charges_layout`).Scan(&done))
	require.False(t, done, "settled charges of before remain")

	window := func(phase string) {
		t.Helper()
		cs, err := charges.SettledOn(ctx, pool, "", day, day.Add(24*time.Hour))
		require.NoError(t, err)
		require.Len(t, cs, 1+1+1+2+7, "%s: succeeded, failed, voided, the two holding identities, 7 more", phase)
		cs, err = charges.SettledOn(ctx, pool, "", day.Add(24*time.Hour), day.Add(48*time.Hour))
		require.NoError(t, err)
		require.Empty(t, cs, phase)
		totals, err := charges.SettledTotalsBetween(ctx, pool, day, day.Add(24*time.Hour))
		require.NoError(t, err)
		var n int64
		for _, tot := range totals {
			n += tot.CapturedCount + tot.DeclinedCount + tot.FailedCount + tot.VoidedCount
		}
		require.Equal(t, int64(1+1+1+1+2+7), n, "%s: the totals' rows, declined too", phase)
	}
	window("before the job")

	more, err := charges.FillSettled(ctx, pool, 3, 2)
	require.NoError(t, err)
	require.True(t, more, "two batches of three do not reach the end")
	window("midway")
	more, err = charges.FillSettled(ctx, pool, 3, 100)
	require.NoError(t, err)
	require.False(t, more)
	require.NoError(t, pool.QueryRow(ctx, `SELECT settled_backfilled FROM charges_layout`).Scan(&done))
	require.True(t, done, "the job marks the table done")
	for s, id := range ids {
		require.Equal(t, want(s, at), readDerived(ctx, t, pool, id), "%s after the job", s)
	}
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE settled_at IS NULL AND status = ANY($1)`,
		[]string{string(charges.Succeeded), string(charges.Failed), string(charges.Voided), string(charges.Declined)}).Scan(&left))
	require.Zero(t, left)
	window("after the job")
	more, err = charges.FillSettled(ctx, pool, 3, 1)
	require.NoError(t, err)
	require.False(t, more, "a run after the end does nothing")
}

// Two nodes migrating at once through the index builds of 00021: the one
// that waits for the migration lock must hold no snapshot, or CREATE
// INDEX CONCURRENTLY (which waits for older snapshots) and the waiting
// node would wait for each other for ever.
func TestConcurrentIndexBuildWithTwoNodes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := dbtest.Pool(t)
	provider, db, err := migrations.NewProvider(pool)
	require.NoError(t, err)
	defer db.Close()
	_, err = provider.DownTo(ctx, 19)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			p, err := pgxpool.New(ctx, pool.Config().ConnString())
			if err != nil {
				errs[i] = err
				return
			}
			defer p.Close()
			errs[i] = migrations.Up(ctx, p)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var valid int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'charges'::regclass AND i.indisvalid AND c.relname = ANY($1)`,
		[]string{"charges_in_flight_idx", "charges_declined_idx", "charges_review_queue_idx", "charges_identity_releasable_idx",
			"charges_settled_at_idx"}).Scan(&valid))
	require.Equal(t, 5, valid)
}
