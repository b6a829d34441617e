package charges_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// storeJob is a River job as the database holds it: what a queued job of
// an older release must still look like.
type storeJob struct{ kind, args string }

// jobsOf returns the River jobs that name charge id, oldest first.
func (b *testBundle) jobsOf(ctx context.Context, t *testing.T, id uuid.UUID) []storeJob {
	t.Helper()
	var jobs []storeJob
	rows, err := b.pool.Query(ctx, `SELECT kind, args::text FROM river_job WHERE args ->> 'charge_id' = $1 ORDER BY id`, id.String())
	require.NoError(t, err)
	var kind, args string
	_, err = pgx.ForEachRow(rows, []any{&kind, &args}, func() error {
		jobs = append(jobs, storeJob{kind, args})
		return nil
	})
	require.NoError(t, err)
	return jobs
}

// requireJob requires that charge c has exactly one job, of kind, whose
// arguments are the JSON jobs of earlier releases carry.
func (b *testBundle) requireJob(ctx context.Context, t *testing.T, c charges.Charge, kind string, attempt int) {
	t.Helper()
	b.requireJobArgs(ctx, t, c, kind, fmt.Sprintf(`{"charge_id": %q, "attempt": %d}`, c.ID, attempt))
}

// requireJobArgs requires that charge c has exactly one job, of kind,
// whose arguments are the JSON args.
func (b *testBundle) requireJobArgs(ctx context.Context, t *testing.T, c charges.Charge, kind, args string) {
	t.Helper()
	jobs := b.jobsOf(ctx, t, c.ID)
	require.Len(t, jobs, 1, "jobs of %s: %v", c.ID, jobs)
	require.Equal(t, kind, jobs[0].kind)
	require.JSONEq(t, args, jobs[0].args)
}

func (b *testBundle) inStoreTx(ctx context.Context, t *testing.T, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(ctx, b.pool, fn)
}

// Starting an attempt twice (a card change retrying what a scan started)
// leaves one authorize job, with the arguments queued jobs have always had.
func TestStartTwiceLeavesOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{attempt: 2})
	for range 2 {
		require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
			return b.pipeline.Store.Start(ctx, tx, []charges.Charge{c})
		}))
	}
	b.requireJob(ctx, t, c, "charge_authorize", 2)
}

// Stopping a cancelled subscription's charges: a waiting one is voided at
// once with no job; a hold is flagged and its void enqueued; a capture in
// flight is left to finish, with no void.
func TestStopSubscription(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from    charges.Status
		to      charges.Status
		flagged bool
		voidJob bool
	}{
		{from: charges.Scheduled, to: charges.Voided},
		{from: charges.Authorized, to: charges.Authorized, flagged: true, voidJob: true},
		{from: charges.Authorizing, to: charges.Authorizing, flagged: true},
		{from: charges.Unknown, to: charges.Unknown, flagged: true},
		{from: charges.Capturing, to: charges.Capturing},
		{from: charges.Succeeded, to: charges.Succeeded},
	} {
		t.Run(string(tc.from), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			c := b.newCharge(ctx, t, fixture{status: tc.from, authorizationRef: "auth_1"})
			require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
				return b.pipeline.Store.StopSubscription(ctx, tx, b.subscriptionID, b.clock.Now())
			}))
			got := b.get(ctx, t, c.ID)
			require.Equal(t, tc.to, got.Status)
			require.Equal(t, tc.flagged, got.VoidRequested)
			if tc.to == charges.Voided {
				require.Equal(t, "subscription_cancelled", got.FailureCode)
				b.requireEvents(ctx, t, c.ID, charges.Voided)
			}
			if tc.voidJob {
				b.requireJob(ctx, t, c, "charge_void", 1)
			} else {
				require.Empty(t, b.jobsOf(ctx, t, c.ID))
			}
		})
	}
}

// The registry's verbs enqueue the capture of a posted hold and the void
// of one too late to post, which carries that decision; a refused one
// goes to review with its hold checked, and only from that attempt's
// hold.
func TestHoldVerbs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("posted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: "auth_1"})
		require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) error { return b.pipeline.Store.HoldPosted(ctx, tx, c.ID, 1) }))
		b.requireJob(ctx, t, c, "charge_capture", 1)
	})
	t.Run("unpostable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: "auth_1"})
		require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) error { return b.pipeline.Store.HoldUnpostable(ctx, tx, c.ID, 1) }))
		b.requireJobArgs(ctx, t, c, "charge_void", fmt.Sprintf(`{"charge_id": %q, "attempt": 1, "unpostable": true}`, c.ID))
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: "auth_1"})
		require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
			_, err := b.pipeline.Store.HoldRefused(ctx, tx, c.ID, 1, charges.ReviewRegistryRejected, b.clock.Now())
			return err
		}))
		require.Equal(t, charges.RequiresReview, b.get(ctx, t, c.ID).Status)
		b.requireEvents(ctx, t, c.ID, charges.RequiresReview)
		b.requireJob(ctx, t, c, "charge_release_hold", 1)
	})
	t.Run("refused for another attempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, attempt: 2, authorizationRef: "auth_1"})
		err := b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
			_, err := b.pipeline.Store.HoldRefused(ctx, tx, c.ID, 1, charges.ReviewRegistryRejected, b.clock.Now())
			return err
		})
		require.True(t, errors.Is(err, charges.ErrStale), "%v", err)
		require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
		require.Empty(t, b.jobsOf(ctx, t, c.ID))
	})
}

// Every charge a create verb makes has its authorize job, enqueued in the
// creating transaction, and a period or bill that already had its charge
// gets no second job: no caller can create a charge that nothing moves.
func TestCreatedChargesHaveTheirAuthorizeJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	news := func(keys ...string) []charges.New {
		var out []charges.New
		for _, k := range keys {
			out = append(out, charges.New{SubscriptionID: b.subscriptionID, CustomerID: "cus_1", PeriodKey: k,
				PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(), Token: currentCard})
		}
		return out
	}
	var created, batched, again []charges.Charge
	require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) (err error) {
		created, err = b.pipeline.Store.Create(ctx, tx, news("p1", "p2"), b.clock.Now())
		return err
	}))
	require.Len(t, created, 2)
	require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) (err error) {
		batch := &pgx.Batch{}
		var one int
		batch.Queue(`SELECT 1`).QueryRow(func(row pgx.Row) error { return row.Scan(&one) })
		batched, err = b.pipeline.Store.CreateBatched(ctx, tx, batch, news("p3"), b.clock.Now())
		require.Equal(t, 1, one, "the caller's statement was sent with the charges")
		return err
	}))
	require.Len(t, batched, 1)
	bill, billCreated := newBillCharge(ctx, t, b, start.Add(time.Hour))
	require.True(t, billCreated)
	for _, c := range append(append(created, batched...), bill) {
		b.requireJob(ctx, t, c, "charge_authorize", 1)
	}

	// The same periods again (a second scan): nothing created, no job.
	require.NoError(t, b.inStoreTx(ctx, t, func(tx pgx.Tx) (err error) {
		again, err = b.pipeline.Store.Create(ctx, tx, news("p1", "p3"), b.clock.Now())
		return err
	}))
	require.Empty(t, again)
	for _, c := range append(created, batched...) {
		b.requireJob(ctx, t, c, "charge_authorize", 1)
	}

	// No charge in the database without its authorize job.
	var orphans int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges c WHERE NOT EXISTS (
		SELECT 1 FROM river_job j WHERE j.kind = 'charge_authorize' AND j.args ->> 'charge_id' = c.id::text)`).Scan(&orphans))
	require.Zero(t, orphans, "charges created without their authorize job")
}
