package charges_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/registry"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

var postingStart = time.Date(2027, 3, 20, 9, 0, 0, 0, time.UTC)

// tooLateBundle is a fine's hold whose posting waits, and the post job's
// worker.
type tooLateBundle struct {
	pool   *pgxpool.Pool
	clk    *testsupport.Clock
	gw     *registrytest.Fake
	sim    *registrysim.Sim // the registry instead of gw, when set
	worker *rivertest.Worker[charges.PostArgs, pgx.Tx]
	charge charges.Charge
	id     string
}

// setupTooLate files a fine's charge authorized at postingStart, its discount
// ending three hours later, with its posting not yet accepted.
func setupTooLate(ctx context.Context, t *testing.T) tooLateBundle {
	return setupTooLateOn(ctx, t, false)
}

// setupTooLateOn is setupTooLate, with the simulated registry (its own
// book, gateway gmp1) in place of the fake gateway when withSim.
func setupTooLateOn(ctx context.Context, t *testing.T, withSim bool) tooLateBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(postingStart)
	gw := registrytest.NewFake(t, "gmp1")
	gateways := []registry.Gateway{gw}
	var sim *registrysim.Sim
	if withSim {
		sim = &registrysim.Sim{Pool: pool, Clock: clk, Names: []string{"gmp1"}}
		gateways = sim.Gateways()
	}
	poster := &charges.Poster{Pool: pool, Gateways: registry.NewBalancer(gateways, time.Second), Clock: clk,
		GiveUpAfter: 24 * time.Hour, Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: clk.Now},
		Logger: zerolog.Nop()}
	workers := river.NewWorkers()
	charges.RegisterPoster(workers, poster)
	charges.Register(workers, &charges.Pipeline{Pool: pool, Clock: clk})
	worker := rivertest.NewWorker(t, riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler),
		Test: river.TestConfig{Time: clk}, TestOnly: true, Workers: workers}, &charges.PostWorker{Poster: poster})

	enrollmentID := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'sim1', 'tok', 12, 2030, $2, $2)`, enrollmentID, postingStart)
	require.NoError(t, err)
	deadline := postingStart.Add(3 * time.Hour)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		c, _, err = (&charges.Store{Queue: insertOnly(t, pool)}).CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: "18810142200817004923", Due: postingStart, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "sim1", Token: "tok", RegistryUIN: "18810142200817004923"}, postingStart)
		return err
	}))
	_, err = pool.Exec(ctx, `UPDATE charges SET status = 'authorized', authorized_at = $2 WHERE id = $1`, c.ID, postingStart)
	require.NoError(t, err)
	c.AttemptCount = 1
	id := registry.PaymentID(c.Key(), 1, 500)
	_, err = pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, id, c.ID, c.RegistryUIN, postingStart)
	require.NoError(t, err)
	return tooLateBundle{pool: pool, clk: clk, gw: gw, sim: sim, worker: worker, charge: c, id: id}
}

func (b tooLateBundle) status(ctx context.Context, t *testing.T) charges.PostingStatus {
	t.Helper()
	var status charges.PostingStatus
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM registry_postings WHERE payment_id = $1`, b.id).Scan(&status))
	return status
}

// A hold is posted no later than an hour before its discount ends: a
// posting that comes back from a registry outage after that is not sent,
// and the hold's void is enqueued. The registry is asked first whether an
// earlier run's posting reached it (its answer lost): unknown there, the
// posting is cancelled; known, it is recorded accepted, for the sweep to
// annul; still processing there, it is abandoned (and its payment asked to
// be withdrawn); when the registry cannot be asked, it stays open for the
// next run.
func TestPostingMadeTooLateIsNotSent(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		known bool
		err   error
		want  charges.PostingStatus
	}{
		"unknown to the registry: cancelled":   {want: charges.PostingCancelled},
		"made by an earlier run: accepted":     {known: true, want: charges.PostingAccepted},
		"still processing there: abandoned":    {err: &registry.PendingError{Gateway: "gmp1"}, want: charges.PostingAbandoned},
		"registry unreachable: left to settle": {err: registry.ErrUnavailable, want: charges.PostingPosting},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupTooLate(ctx, t)
			b.gw.LookupFunc = registrytest.LooksUp(tc.known, false, tc.err)
			b.gw.AnnulFunc = registrytest.Annuls(tc.err)
			// The registry was down; the clock is now within the hour
			// before the deadline: the hold is not posted, it is released.
			b.clk.Advance(150 * time.Minute)
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = b.worker.Work(ctx, t, tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			require.Empty(t, b.gw.CallsOf("post"), "nothing is sent to the registry")
			require.NotEmpty(t, b.gw.CallsOf("lookup"), "the registry is asked first")
			require.Equal(t, tc.want, b.status(ctx, t))
			rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, riverpgxv5.New(b.pool),
				charges.VoidArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)
		})
	}
}

// A payment the registry is still processing when the hold's last moment
// to post passes is abandoned, never failed: the hold's void is enqueued
// at once, the job keeps asking the registry (snoozed: no River attempt is
// spent) long past REBILL_UNAVAILABLE_FOR, and once the registry accepts
// the payment after all it is annulled there. Judged on the simulated
// registry's own book, which withdraws nothing while it processes.
func TestPaymentStillProcessingPastTheLastMomentIsAnnulledOnceAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLateOn(ctx, t, true)
	// Five looks answer "processing": the post, the look-up when the hold
	// is released, and three questions of the abandoned posting's job.
	looks := 5
	_, err := b.sim.SetFaults(ctx, "gmp1", registrysim.FaultsPatch{Processing: &looks})
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	work := func() river.EventKind {
		t.Helper()
		res, err := b.worker.Work(ctx, t, tx, charges.PostArgs{PaymentID: b.id}, nil)
		require.NoError(t, err)
		return res.EventKind
	}
	book := func() []string {
		t.Helper()
		entries, err := b.sim.Ledger(ctx)
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.PaymentID+" "+e.Status)
		}
		return out
	}

	require.Equal(t, river.EventKindJobSnoozed, work(), "posted, still processing: the job waits")
	require.Equal(t, charges.PostingPosting, b.status(ctx, t))
	require.Equal(t, []string{b.id + " processing"}, book())

	b.clk.Advance(150 * time.Minute) // within the hour before the discount ends
	require.Equal(t, river.EventKindJobSnoozed, work())
	require.Equal(t, charges.PostingAbandoned, b.status(ctx, t), "sent, fate unknown, money released")
	rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, riverpgxv5.New(b.pool), charges.VoidArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)

	for range 3 {
		b.clk.Advance(48 * time.Hour) // far past REBILL_UNAVAILABLE_FOR
		require.Equal(t, river.EventKindJobSnoozed, work(), "it keeps asking")
		require.Equal(t, charges.PostingAbandoned, b.status(ctx, t), "never final while the registry may still accept")
		require.Equal(t, []string{b.id + " processing"}, book())
	}

	require.Equal(t, river.EventKindJobCompleted, work(), "the registry accepted it: annulled")
	require.Equal(t, charges.PostingAnnulled, b.status(ctx, t))
	require.Equal(t, []string{b.id + " annulled"}, book(), "the registry's book holds no payment without its money")
	require.Equal(t, river.EventKindJobCompleted, work(), "settled: a late run changes nothing")
	require.Equal(t, []string{b.id + " annulled"}, book())
}
