package usecases_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/usecases"
)

// The world is everything the model test drives: the real stores, use
// cases, scan and charge pipeline on one test database, River jobs worked
// one at a time through rivertest workers, and the fake gateway. One world
// serves every rapid check of a test function; reset empties it between
// checks.
//
// Time is the test's manual clock everywhere: the domain's, River's (jobs
// are created and scheduled on it), and the pipeline's wait for a gateway
// that did nothing. Nothing waits on the wall clock, so a sequence of
// actions replays exactly, which rapid's shrinking needs.

// Settings of the world: short, so that short sequences reach every state.
var (
	modelDunning        = charges.Dunning{24 * time.Hour, 72 * time.Hour} // three attempts
	modelMaxAttempts    = 3                                               // River attempts of a job
	modelRetryAfter     = time.Minute                                     // River's wait after an error
	modelUnavailableFor = 12 * time.Hour                                  // waits on a gateway that did nothing
	// The catch-up window is out of reach of these sequences (the
	// renewals' own tests cover it): every missed period is owed.
	modelCatchUp = 10 * 365 * 24 * time.Hour
)

// chargeJobKinds are the pipeline's job kinds, the only jobs in the world.
var chargeJobKinds = []string{
	charges.AuthorizeArgs{}.Kind(), charges.CaptureArgs{}.Kind(), charges.VoidArgs{}.Kind(),
	charges.LookupArgs{}.Kind(), charges.ReleaseHoldArgs{}.Kind(),
}

type world struct {
	t        *testing.T
	pool     *pgxpool.Pool
	clock    *testsupport.Clock
	gw       *fakeGateway
	pipeline *charges.Pipeline
	renewals *renewals.Renewals
	svc      *usecases.Service
	client   *river.Client[pgx.Tx] // inserts jobs, unique per attempt as in production
	stats    map[string]int        // what the checks reached, for -v
	work     map[string]func(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow) (*rivertest.WorkResult, error)
}

// fixedRetry is River's retry policy here: a fixed wait on the test clock
// (production's jitter would make a replay differ).
type fixedRetry struct{ clock *testsupport.Clock }

func (r fixedRetry) NextRetry(*rivertype.JobRow) time.Time { return r.clock.Now().Add(modelRetryAfter) }

// uniqueInserts runs a pipeline worker with the production-like client in
// its context: rivertest's own client disables unique enforcement, and the
// pipeline inserts its next jobs through river.ClientFromContext.
type uniqueInserts[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	inner  river.Worker[T]
	client *river.Client[pgx.Tx]
}

func (w *uniqueInserts[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return w.inner.Work(rivertest.WorkContext(ctx, w.client), job)
}

func (w *uniqueInserts[T]) Timeout(job *river.Job[T]) time.Duration { return w.inner.Timeout(job) }

func addWorker[T river.JobArgs](w *world, driver *riverpgxv5.Driver, config *river.Config, inner river.Worker[T]) {
	var args T
	tw := rivertest.NewWorker(w.t, driver, config, river.Worker[T](&uniqueInserts[T]{inner: inner, client: w.client}))
	w.work[args.Kind()] = func(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow) (*rivertest.WorkResult, error) {
		return tw.WorkJob(ctx, w.t, tx, job)
	}
}

// staff is who makes the requests: the use cases' rules for customers are
// not what these tests are about.
var staff = usecases.Caller{Actor: subscriptions.Actor{ID: "model", Role: "admin"}}

// card is a payment method on the fake gateway.
func card(token string) rebilltype.PaymentMethod {
	return rebilltype.PaymentMethod{Gateway: "fake", Token: token, ExpMonth: 12, ExpYear: 2035}
}

// modelStart is the first instant of every check (the clock is set back
// to it by reset).
var modelStart = time.Date(2027, 1, 30, 9, 0, 0, 0, time.UTC)

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{t: t, pool: dbtest.Pool(t), clock: testsupport.NewClock(modelStart), stats: map[string]int{},
		work: map[string]func(context.Context, pgx.Tx, *rivertype.JobRow) (*rivertest.WorkResult, error){}}
	w.gw = newFakeGateway()
	if _, err := w.pool.Exec(ctx, moveLogSQL); err != nil {
		t.Fatalf("install the move log: %v", err)
	}
	subs := subscriptions.NewStore(w.clock)
	store := &charges.Store{}
	w.pipeline = &charges.Pipeline{
		Pool:        w.pool,
		Store:       store,
		Owners:      charges.Owners{Subscriptions: renewals.Outcomes{Subscriptions: subs}},
		Clock:       w.clock,
		Dunning:     modelDunning,
		CallTimeout: 5 * time.Second,
		// Waits for a gateway that did nothing are not jittered (zero):
		// the step may run again at once, and after UnavailableFor on the
		// test clock it goes to review.
		Retry:          charges.RetryPolicy{Now: w.clock.Now},
		UnavailableFor: modelUnavailableFor,
		Logger:         zerolog.Nop(),
	}
	w.renewals = &renewals.Renewals{Pool: w.pool, Subscriptions: subs, Clock: w.clock, Charges: store, CatchUpWindow: modelCatchUp,
		BatchSize: 2, ScanWorkers: 1, ScanInterval: time.Minute, Logger: zerolog.Nop()}
	w.pipeline.Owners.Subscriptions = renewals.Outcomes{Subscriptions: subs, Renewals: w.renewals}
	w.svc = &usecases.Service{Pool: w.pool, Subscriptions: subs, Renewals: w.renewals, Attempts: w.pipeline, Clock: w.clock,
		Owners: w.pipeline.Owners}
	w.newGateways()

	driver := riverpgxv5.New(w.pool)
	workers := river.NewWorkers()
	charges.Register(workers, w.pipeline)
	config := &river.Config{
		Logger:      slog.New(slog.DiscardHandler),
		MaxAttempts: modelMaxAttempts,
		RetryPolicy: fixedRetry{w.clock},
		Test:        river.TestConfig{Time: w.clock},
		TestOnly:    true,
		Workers:     workers,
	}
	client, err := river.NewClient(driver, config)
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	w.client = client
	store.Queue = client
	addWorker(w, driver, config, river.Worker[charges.AuthorizeArgs](&charges.AuthorizeWorker{Pipeline: w.pipeline}))
	addWorker(w, driver, config, river.Worker[charges.CaptureArgs](&charges.CaptureWorker{Pipeline: w.pipeline}))
	addWorker(w, driver, config, river.Worker[charges.VoidArgs](&charges.VoidWorker{Pipeline: w.pipeline}))
	addWorker(w, driver, config, river.Worker[charges.LookupArgs](&charges.LookupWorker{Pipeline: w.pipeline}))
	addWorker(w, driver, config, river.Worker[charges.ReleaseHoldArgs](&charges.ReleaseHoldWorker{Pipeline: w.pipeline}))
	return w
}

// newGateways puts the fake behind a circuit breaker that never opens: the
// breaker counts on the wall clock, which would make a replay differ. (The
// circuit-open path is covered by the charges package's tests.)
func (w *world) newGateways() {
	gws := fleet.New([]gateway.Gateway{w.gw},
		fleet.Breaker{Window: time.Hour, MinCalls: math.MaxUint32, FailureRatio: 1, OpenFor: time.Second})
	w.pipeline.Gateways = gws
	w.svc.KnownGateway = gws.Known
}

// reset empties the world for the next check.
func (w *world) reset(ctx context.Context) error {
	_, err := w.pool.Exec(ctx, `DELETE FROM river_job; DELETE FROM charges; DELETE FROM subscription_events;
		DELETE FROM subscription_credits; DELETE FROM subscription_changes;
		DELETE FROM subscriptions; DELETE FROM model_charge_moves; DELETE FROM model_sub_moves`)
	if err != nil {
		return fmt.Errorf("reset the world: %w", err)
	}
	w.clock.Set(modelStart)
	w.gw.reset()
	w.newGateways()
	return nil
}

// moveLogSQL records, in the test database only, every status change of a
// charge or a subscription as the database saw it, whoever made it: the
// invariants judge every real move, not only the ones a test observes.
const moveLogSQL = `
CREATE TABLE IF NOT EXISTS model_charge_moves (
	id bigserial PRIMARY KEY, charge_id uuid NOT NULL, subscription_id uuid NOT NULL,
	from_status text, to_status text NOT NULL, from_attempt int, to_attempt int NOT NULL);
CREATE TABLE IF NOT EXISTS model_sub_moves (
	id bigserial PRIMARY KEY, subscription_id uuid NOT NULL, from_status text, to_status text NOT NULL);
CREATE OR REPLACE FUNCTION model_log_charge_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO model_charge_moves (charge_id, subscription_id, from_status, to_status, from_attempt, to_attempt)
		VALUES (NEW.id, NEW.subscription_id, NULL, NEW.status, NULL, NEW.attempt_count);
	ELSIF NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt_count IS DISTINCT FROM OLD.attempt_count THEN
		INSERT INTO model_charge_moves (charge_id, subscription_id, from_status, to_status, from_attempt, to_attempt)
		VALUES (NEW.id, NEW.subscription_id, OLD.status, NEW.status, OLD.attempt_count, NEW.attempt_count);
	END IF;
	RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION model_log_sub_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO model_sub_moves (subscription_id, from_status, to_status) VALUES (NEW.id, NULL, NEW.status);
	ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
		INSERT INTO model_sub_moves (subscription_id, from_status, to_status) VALUES (NEW.id, OLD.status, NEW.status);
	END IF;
	RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS model_charge_moves ON charges;
CREATE TRIGGER model_charge_moves AFTER INSERT OR UPDATE ON charges
	FOR EACH ROW EXECUTE FUNCTION model_log_charge_move();
DROP TRIGGER IF EXISTS model_sub_moves ON subscriptions;
CREATE TRIGGER model_sub_moves AFTER INSERT OR UPDATE ON subscriptions
	FOR EACH ROW EXECUTE FUNCTION model_log_sub_move();
`

// pendingJob is a charge job that River would run now.
type pendingJob struct {
	id        int64
	kind      string
	charge    uuid.UUID
	attempt   int
	subIndex  int // the subscription's index in the model
	start     time.Time
	op        string // a reconcile job's phase
	scheduled time.Time
}

func (j pendingJob) String() string {
	s := fmt.Sprintf("%s s%d/%s a%d", j.kind, j.subIndex, j.start.Format("2006-01-02T15:04"), j.attempt)
	if j.op != "" {
		s += " " + j.op
	}
	return s
}

// runnable lists the charge jobs River would run at the clock's now
// (available, or scheduled or retryable and due), in an order that does
// not depend on random ids: subscription, period, kind, attempt.
func (w *world) runnable(ctx context.Context, subIndex map[uuid.UUID]int) ([]pendingJob, error) {
	return w.jobs(ctx, subIndex, `j.state IN ('available', 'scheduled', 'retryable') AND j.scheduled_at <= $1`)
}

func (w *world) jobs(ctx context.Context, subIndex map[uuid.UUID]int, where string) ([]pendingJob, error) {
	rows, err := w.pool.Query(ctx, `SELECT j.id, j.kind, c.id, (j.args ->> 'attempt')::int, c.subscription_id,
			c.period_start, coalesce(j.args ->> 'phase', ''), j.scheduled_at
		FROM river_job j JOIN charges c ON c.id = (j.args ->> 'charge_id')::uuid
		WHERE `+where+` AND j.kind = ANY($2) AND $1::timestamptz IS NOT NULL`,
		w.clock.Now(), chargeJobKinds)
	if err != nil {
		return nil, fmt.Errorf("list runnable jobs: %w", err)
	}
	defer rows.Close()
	var jobs []pendingJob
	for rows.Next() {
		var j pendingJob
		var sub uuid.UUID
		if err := rows.Scan(&j.id, &j.kind, &j.charge, &j.attempt, &sub, &j.start, &j.op, &j.scheduled); err != nil {
			return nil, err
		}
		j.start = j.start.UTC()
		j.subIndex = subIndex[sub]
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Slice(jobs, func(a, b int) bool {
		x, y := jobs[a], jobs[b]
		switch {
		case x.subIndex != y.subIndex:
			return x.subIndex < y.subIndex
		case !x.start.Equal(y.start):
			return x.start.Before(y.start)
		case x.kind != y.kind:
			return x.kind < y.kind
		case x.attempt != y.attempt:
			return x.attempt < y.attempt
		default:
			return x.id < y.id
		}
	})
	return jobs, nil
}

// errCrashed stands for the worker's process dying (simulatedCrash).
var errCrashed = errors.New("the worker crashed")

// jobOutcome is what River recorded for a worked job.
type jobOutcome struct {
	event river.EventKind
	state rivertype.JobState
	err   error // what the worker returned (River retries it)
}

// runJob works one job through its real worker, as River would: the job's
// row moves to running and to its outcome in a transaction that commits,
// while the pipeline commits its own steps.
func (w *world) runJob(ctx context.Context, j pendingJob) (jobOutcome, error) {
	// A deadlock between a step and a request that runs meanwhile fails
	// the test instead of hanging it.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	row, err := w.client.JobGet(ctx, j.id)
	if err != nil {
		return jobOutcome{}, fmt.Errorf("get job %d: %w", j.id, err)
	}
	work, ok := w.work[row.Kind]
	if !ok {
		return jobOutcome{}, fmt.Errorf("no worker for %s", row.Kind)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return jobOutcome{}, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	res, workErr := work(ctx, tx, row)
	if p, panicked := workErr.(*rivertest.PanicError); panicked {
		if _, crash := p.Cause.(simulatedCrash); !crash {
			return jobOutcome{}, fmt.Errorf("%s panicked: %w", j, workErr)
		}
		workErr = errCrashed
	}
	if res == nil {
		return jobOutcome{}, fmt.Errorf("%s: no result: %v", j, workErr)
	}
	if err := tx.Commit(ctx); err != nil {
		return jobOutcome{}, fmt.Errorf("commit job %d: %w", j.id, err)
	}
	return jobOutcome{event: res.EventKind, state: res.Job.State, err: workErr}, nil
}
