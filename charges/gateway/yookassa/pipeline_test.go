package yookassa_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/yookassa"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// TestPipelineThroughYooKassa charges one period through the real charges
// pipeline (its River workers, its PostgreSQL rows) and the fake shop,
// losing the answer of the hold and of the capture: reconciliation finds
// both, and the shop ends with one payment captured once. Past the 24 h
// in which the create may be sent again, the hold is found by its
// metadata; a create that never arrived is then unprovable, and the
// charge goes to review with nothing held.
func TestPipelineThroughYooKassa(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		createFault func(f *fakeYooKassa)
		waitBefore  time.Duration // how long the reconcile of the hold runs after the hold was sent
		want        charges.Status
		wantPosts   []string // the shop's POSTs, by path shape
	}{
		{name: "LostAnswersWithin24h", createFault: func(f *fakeYooKassa) { f.loseNext("create", 1) },
			waitBefore: time.Hour, want: charges.Succeeded,
			wantPosts: []string{"create", "create", "capture"}}, // the replay made no second hold
		{name: "LostAnswersAfter24h", createFault: func(f *fakeYooKassa) { f.loseNext("create", 1) },
			waitBefore: 30 * time.Hour, want: charges.Succeeded,
			wantPosts: []string{"create", "capture"}},
		{name: "CreateNeverArrivedAfter24h", createFault: func(f *fakeYooKassa) { f.failNext("create", 500) },
			waitBefore: 30 * time.Hour, want: charges.RequiresReview,
			wantPosts: []string{"create"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newPipelineWorld(t)
			c := w.newCharge(ctx, t)
			tc.createFault(w.fake)
			w.fake.loseNext("capture", 1)

			w.work(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1})
			require.Equal(t, charges.Unknown, w.get(ctx, t, c.ID).Status, "the hold's answer was lost")
			w.clock.Advance(tc.waitBefore)
			w.drain(ctx, t)

			got := w.get(ctx, t, c.ID)
			require.Equal(t, tc.want, got.Status, "review reason %q", got.ReviewReason)
			var posts []string
			for _, r := range w.fake.received() {
				if r.Method == http.MethodPost {
					posts = append(posts, postKind(r.Path))
				}
			}
			require.Equal(t, tc.wantPosts, posts)
			payments := w.fake.all()
			if tc.want == charges.RequiresReview {
				require.Empty(t, payments, "nothing held")
				require.Contains(t, got.ReviewReason, "can no longer tell")
				require.Empty(t, w.subs.paid())
				return
			}
			require.Len(t, payments, 1, "one payment")
			require.Equal(t, "succeeded", payments[0].Status, "captured")
			require.Equal(t, fakeAmount{Value: "499.00", Currency: "RUB"}, payments[0].Amount)
			require.Equal(t, payments[0].ID, got.AuthorizationRef)
			require.Equal(t, []uuid.UUID{c.ID}, w.subs.paid(), "paid once")
		})
	}
}

func postKind(path string) string {
	switch {
	case path == "/v3/payments":
		return "create"
	case len(path) > len("/capture") && path[len(path)-len("/capture"):] == "/capture":
		return "capture"
	default:
		return "cancel"
	}
}

// pipelineWorld is the charges pipeline on a test database, its jobs
// worked one at a time by rivertest in a transaction of the test.
type pipelineWorld struct {
	clock  *testsupport.Clock
	fake   *fakeYooKassa
	client *river.Client[pgx.Tx]
	subs   *paidSubscriptions
	tx     pgx.Tx
	subID  uuid.UUID
	works  map[string]func(ctx context.Context, t *testing.T, job *rivertype.JobRow) error
	done   map[int64]bool
	p      *charges.Pipeline
}

func newPipelineWorld(t *testing.T) *pipelineWorld {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	fake := newFake(t, clk)
	gw, err := yookassa.New(yookassa.Config{Name: "yk1", BaseURL: fake.URL(), ShopID: fake.shopID,
		SecretKey: testSecret, Timeout: 2 * time.Second, Clock: clk})
	require.NoError(t, err)
	subs := &paidSubscriptions{current: charges.OwnerState{Gateway: "yk1", Token: "pm_ok_1"}}
	p := &charges.Pipeline{
		Pool: pool,
		// A breaker that never opens: this test is about lost answers.
		Gateways:       fleet.New([]gateway.Gateway{gw}, fleet.Breaker{Window: time.Hour, MinCalls: math.MaxUint32, FailureRatio: 1, OpenFor: time.Second}),
		Owners:         charges.Owners{Subscriptions: subs},
		Clock:          clk,
		Dunning:        charges.Dunning{24 * time.Hour},
		CallTimeout:    2 * time.Second,
		Retry:          charges.RetryPolicy{Base: time.Minute, Max: time.Hour, Now: clk.Now},
		UnavailableFor: 6 * time.Hour,
		Logger:         zerolog.Nop(),
	}
	driver := riverpgxv5.New(pool)
	workers := river.NewWorkers()
	charges.Register(workers, p)
	config := &river.Config{Logger: slog.New(slog.DiscardHandler), MaxAttempts: 5, RetryPolicy: p.Retry,
		Test: river.TestConfig{Time: clk}, TestOnly: true, Workers: workers}
	client, err := river.NewClient(driver, config)
	require.NoError(t, err)
	w := &pipelineWorld{clock: clk, fake: fake, client: client, subs: subs, subID: uuid.New(),
		works: map[string]func(context.Context, *testing.T, *rivertype.JobRow) error{}, done: map[int64]bool{}, p: p}
	addWork(w, driver, config, river.Worker[charges.AuthorizeArgs](&charges.AuthorizeWorker{Pipeline: p}))
	addWork(w, driver, config, river.Worker[charges.CaptureArgs](&charges.CaptureWorker{Pipeline: p}))
	addWork(w, driver, config, river.Worker[charges.VoidArgs](&charges.VoidWorker{Pipeline: p}))
	addWork(w, driver, config, river.Worker[charges.LookupArgs](&charges.LookupWorker{Pipeline: p}))
	addWork(w, driver, config, river.Worker[charges.ReleaseHoldArgs](&charges.ReleaseHoldWorker{Pipeline: p}))

	_, err = pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cus_1', 'active', 49900, 'RUB', 'month', 1, 'UTC', $2, $3, 'yk1', 'pm_ok_1', 12, 2030, $2, $2)`,
		w.subID, start, start.AddDate(0, 1, 0))
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	w.tx = tx
	return w
}

func addWork[T river.JobArgs](w *pipelineWorld, driver *riverpgxv5.Driver, config *river.Config, worker river.Worker[T]) {
	var args T
	var tw *rivertest.Worker[T, pgx.Tx]
	w.works[args.Kind()] = func(ctx context.Context, t *testing.T, job *rivertype.JobRow) error {
		if tw == nil {
			tw = rivertest.NewWorker(t, driver, config, worker)
		}
		_, err := tw.WorkJob(ctx, t, w.tx, job)
		return err
	}
}

func (w *pipelineWorld) newCharge(ctx context.Context, t *testing.T) charges.Charge {
	t.Helper()
	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, w.p.Pool, func(tx pgx.Tx) error {
		var err error
		created, err = (&charges.Store{Queue: w.client}).Create(ctx, tx, []charges.New{{SubscriptionID: w.subID, CustomerID: "cus_1",
			PeriodKey: "2026-12-01", PeriodStart: start, Amount: 49900, Currency: "RUB", Gateway: "yk1",
			Token: "pm_ok_1"}}, w.clock.Now())
		return err
	}))
	require.Len(t, created, 1)
	return created[0]
}

func (w *pipelineWorld) get(ctx context.Context, t *testing.T, id uuid.UUID) charges.Charge {
	t.Helper()
	c, err := charges.Get(ctx, w.p.Pool, id)
	require.NoError(t, err)
	return c
}

// work runs one job of args, as the first step.
func (w *pipelineWorld) work(ctx context.Context, t *testing.T, args river.JobArgs) {
	t.Helper()
	res, err := w.client.InsertTx(ctx, w.tx, args, nil)
	require.NoError(t, err)
	require.NoError(t, w.works[args.Kind()](ctx, t, res.Job))
	w.done[res.Job.ID] = true
}

// drain works the jobs the steps committed, oldest first, until none is
// left (a job that fails is worked again, as River would retry it).
func (w *pipelineWorld) drain(ctx context.Context, t *testing.T) {
	t.Helper()
	for range 20 {
		rows, err := w.p.Pool.Query(ctx, `SELECT id FROM river_job WHERE state = 'available' ORDER BY id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		var next int64
		for _, id := range ids {
			if !w.done[id] {
				next = id
				break
			}
		}
		if next == 0 {
			return
		}
		job, err := w.client.JobGetTx(ctx, w.tx, next)
		require.NoError(t, err)
		if err := w.works[job.Kind](ctx, t, job); err == nil {
			w.done[next] = true
		}
	}
	t.Fatal("the pipeline did not settle in 20 jobs")
}

// paidSubscriptions is the subscription side: Lock locks the real row,
// and ChargePaid records the charge.
type paidSubscriptions struct {
	mu      sync.Mutex
	current charges.OwnerState
	charged []uuid.UUID
}

func (s *paidSubscriptions) paid() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uuid.UUID(nil), s.charged...)
}

func (s *paidSubscriptions) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.OwnerState, error) {
	var found uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT id FROM subscriptions WHERE id = $1 FOR UPDATE`, id).Scan(&found); err != nil {
		return charges.OwnerState{}, fmt.Errorf("lock subscription: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, nil
}

func (s *paidSubscriptions) ChargePaid(_ context.Context, _ pgx.Tx, c charges.Charge, _ bool) (*time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.charged = append(s.charged, c.ID)
	return nil, nil
}

func (s *paidSubscriptions) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error { return nil }

func (s *paidSubscriptions) ChargeFailed(context.Context, pgx.Tx, charges.Charge) (*time.Time, error) {
	return nil, nil
}
