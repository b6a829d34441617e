package gisgmp_test

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
	"github.com/rebill/rebill/gisgmp"
	"github.com/rebill/rebill/internal/dbtest"
	"github.com/rebill/rebill/internal/testsupport"
)

var start = time.Date(2027, 3, 20, 9, 0, 0, 0, time.UTC)

// tooLateBundle is a fine's hold whose posting waits, and the post job's
// worker.
type tooLateBundle struct {
	pool   *pgxpool.Pool
	clk    *testsupport.Clock
	gw     *fakeGateway
	worker *rivertest.Worker[gisgmp.PostArgs, pgx.Tx]
	charge charges.Charge
	id     string
}

// setupTooLate files a fine's charge authorized at start, its discount
// ending three hours later, with its posting not yet accepted.
func setupTooLate(ctx context.Context, t *testing.T) tooLateBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	gw := newFakeGateway(t, "gmp1")
	poster := &gisgmp.Poster{Pool: pool, Gateways: gisgmp.NewBalancer([]gisgmp.Gateway{gw}, time.Second), Clock: clk,
		GiveUpAfter: 24 * time.Hour, Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: clk.Now},
		Logger: zerolog.Nop()}
	workers := river.NewWorkers()
	gisgmp.Register(workers, poster)
	charges.Register(workers, &charges.Pipeline{Pool: pool, Clock: clk})
	worker := rivertest.NewWorker(t, riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler),
		Test: river.TestConfig{Time: clk}, TestOnly: true, Workers: workers}, &gisgmp.PostWorker{Poster: poster})

	enrollmentID := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'sim1', 'tok', 12, 2030, $2, $2)`, enrollmentID, start)
	require.NoError(t, err)
	deadline := start.Add(3 * time.Hour)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		c, _, err = charges.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: "18810142200817004923", Due: start, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "sim1", Token: "tok", RegistryUIN: "18810142200817004923"}, start)
		return err
	}))
	_, err = pool.Exec(ctx, `UPDATE charges SET status = 'authorized', authorized_at = $2 WHERE id = $1`, c.ID, start)
	require.NoError(t, err)
	c.AttemptCount = 1
	id := gisgmp.PaymentID(c.Key(), 1, 500)
	_, err = pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, id, c.ID, c.RegistryUIN, start)
	require.NoError(t, err)
	return tooLateBundle{pool: pool, clk: clk, gw: gw, worker: worker, charge: c, id: id}
}

func (b tooLateBundle) status(ctx context.Context, t *testing.T) gisgmp.PostingStatus {
	t.Helper()
	var status gisgmp.PostingStatus
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM registry_postings WHERE payment_id = $1`, b.id).Scan(&status))
	return status
}

// A hold is posted no later than an hour before its discount ends: a
// posting that comes back from a registry outage after that is not sent,
// and the hold's void is enqueued. The registry is asked first whether an
// earlier run's posting reached it (its answer lost): unknown there, the
// posting is cancelled; known, it is recorded accepted, for the sweep to
// annul; when the registry cannot be asked, it stays open for the next run.
func TestPostingMadeTooLateIsNotSent(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		known bool
		err   error
		want  gisgmp.PostingStatus
	}{
		"unknown to the registry: cancelled":   {want: gisgmp.StatusCancelled},
		"made by an earlier run: accepted":     {known: true, want: gisgmp.StatusAccepted},
		"registry unreachable: left to settle": {err: gisgmp.ErrUnavailable, want: gisgmp.StatusPosting},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupTooLate(ctx, t)
			b.gw.LookupFunc = looksUp(tc.known, false, tc.err)
			// The registry was down; the clock is now within the hour
			// before the deadline: the hold is not posted, it is released.
			b.clk.Advance(150 * time.Minute)
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = b.worker.Work(ctx, t, tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			require.Empty(t, b.gw.callsOf("post"), "nothing is sent to the registry")
			require.NotEmpty(t, b.gw.callsOf("lookup"), "the registry is asked first")
			require.Equal(t, tc.want, b.status(ctx, t))
			rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, riverpgxv5.New(b.pool),
				charges.VoidArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)
		})
	}
}
