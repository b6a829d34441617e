package registry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/internal/dbtest"
	"github.com/rebill/rebill/internal/testsupport"
	"github.com/rebill/rebill/registry"
)

var start = time.Date(2027, 3, 20, 9, 0, 0, 0, time.UTC)

// A hold is posted no later than an hour before its discount ends: a
// posting that comes back from a registry outage after that is cancelled,
// nothing is sent, and the hold's void is enqueued.
func TestPostingMadeTooLateIsNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	gw := &fakeGateway{name: "gmp1"}
	poster := &registry.Poster{Pool: pool, Gateways: registry.NewBalancer([]registry.Gateway{gw}, time.Second), Clock: clk,
		GiveUpAfter: 24 * time.Hour, Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: clk.Now},
		Logger: zerolog.Nop()}
	workers := river.NewWorkers()
	registry.Register(workers, poster)
	charges.Register(workers, &charges.Pipeline{Pool: pool, Clock: clk})
	worker := rivertest.NewWorker(t, riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler),
		Test: river.TestConfig{Time: clk}, TestOnly: true, Workers: workers}, &registry.PostWorker{Poster: poster})

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
	id := registry.PaymentID(c.Key(), 1, 500)
	_, err = pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, id, c.ID, c.RegistryUIN, start)
	require.NoError(t, err)

	// The registry was down; it answers again, but the clock is within the
	// hour before the deadline: the hold is not posted, it is released.
	clk.Advance(150 * time.Minute)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = worker.Work(ctx, t, tx, registry.PostArgs{PaymentID: id}, nil)
	require.NoError(t, err)
	require.Zero(t, gw.calls, "nothing is sent to the registry")
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM registry_postings WHERE payment_id = $1`, id).Scan(&status))
	require.Equal(t, registry.StatusCancelled, status)
	rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, riverpgxv5.New(pool), charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
}
