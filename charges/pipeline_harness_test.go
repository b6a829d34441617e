package charges_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// The pipeline tests drive each worker through rivertest.Worker: the job
// row and River's context (a client for InsertTx) live in a transaction of
// the test, rolled back at its end. The pipeline opens its own
// transactions from Pipeline.Pool by design (it never holds one across a
// gateway call), so what a step records, and the next job it enqueues
// through river.ClientFromContext, is committed: the tests read the charge
// through the pool and assert the next job with rivertest.Require*Inserted
// against the pool, where the job being worked (uncommitted) is not seen.
//
// The rivertest client does not enforce uniqueness, so a step that
// enqueued its next job twice would show two jobs here (the production
// client would drop the second): requireNextJobs fails on that.

const (
	periodKey   = "2026-12-01"
	currentCard = "tok_1"
	newCard     = "tok_2"
	holdRef     = "auth_1"
)

var (
	// start is the fixed time every test begins at.
	start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	// periodStart is when the charged period began.
	periodStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// dunning retries a soft decline one and three days after the first.
	dunning = charges.Dunning{24 * time.Hour, 72 * time.Hour}
	// retryBase and retryMax bound the waits for a gateway that did nothing.
	retryBase, retryMax = time.Minute, time.Hour
	// unavailableFor bounds those waits before review.
	unavailableFor = 6 * time.Hour
	// circuitOpenFor is how long a tripped breaker stays open.
	circuitOpenFor = time.Minute
)

type testBundle struct {
	client         *river.Client[pgx.Tx] // inserts jobs that a test works later
	clock          *testsupport.Clock
	config         *river.Config
	driver         *riverpgxv5.Driver
	gateway        *gatewaytest.Gateway
	logs           *testsupport.LockedBuffer
	pipeline       *charges.Pipeline
	pool           *pgxpool.Pool
	subs           *fakeSubscriptions
	subscriptionID uuid.UUID
	tx             pgx.Tx                       // the River job's transaction, rolled back at the end
	fixtures       map[uuid.UUID]charges.Status // each charge's status before its step
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	logs := &testsupport.LockedBuffer{}
	fake := gatewaytest.New(t, "fake")
	b := &testBundle{
		clock:          clk,
		driver:         riverpgxv5.New(pool),
		gateway:        fake,
		logs:           logs,
		pool:           pool,
		subs:           &fakeSubscriptions{current: charges.OwnerState{Gateway: fake.Name(), Token: currentCard}},
		subscriptionID: uuid.New(),
		fixtures:       map[uuid.UUID]charges.Status{},
	}
	b.pipeline = &charges.Pipeline{
		Pool:           pool,
		Store:          &charges.Store{Events: events},
		Gateways:       fleet.New([]gateway.Gateway{fake}, fleet.DefaultBreaker),
		Owners:         charges.Owners{Subscriptions: b.subs},
		Clock:          clk,
		Dunning:        dunning,
		CallTimeout:    5 * time.Second,
		Retry:          charges.RetryPolicy{Base: retryBase, Max: retryMax, Now: clk.Now},
		UnavailableFor: unavailableFor,
		Logger:         zerolog.New(logs),
	}
	workers := river.NewWorkers()
	charges.Register(workers, b.pipeline)
	b.config = &river.Config{
		Logger:      slog.New(slog.DiscardHandler),
		MaxAttempts: 5,
		RetryPolicy: b.pipeline.Retry,
		Test:        river.TestConfig{Time: clk}, // River's time is the test's: jobs are created and scheduled on it
		TestOnly:    true,
		Workers:     workers,
	}
	client, err := river.NewClient(b.driver, b.config)
	require.NoError(t, err)
	b.client = client
	b.pipeline.Store.Queue = client

	_, err = pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cus_1', 'active', 1999, 'EUR', 'month', 1, 'UTC', $2, $3, $4, $5, 12, 2030, $2, $2)`,
		b.subscriptionID, periodStart, periodStart.AddDate(0, 1, 0), fake.Name(), currentCard)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	b.tx = tx
	return b
}

// chargeKey is the charge's business key, spelled out here rather than
// taken from charges.Key so that a change of the key format fails tests.
func (b *testBundle) chargeKey() string { return b.subscriptionID.String() + ":" + periodKey }

// key is the gateway idempotency key of an attempt's phase.
func (b *testBundle) key(attempt int, phase gateway.Op) string {
	return fmt.Sprintf("%s:a%d:%s", b.chargeKey(), attempt, phase)
}

// releasedNow: the step released the hold.
var releasedNow = new(time.Duration(0))

// dropJobs deletes, in tx, the jobs of charges cs: a fixture that puts a
// charge in a state of its own with SQL leaves no job of its creation.
func dropJobs(ctx context.Context, tx pgx.Tx, cs []charges.Charge) error {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID.String()
	}
	_, err := tx.Exec(ctx, `DELETE FROM river_job WHERE args ->> 'charge_id' = ANY($1)`, ids)
	return err
}

// fixture is the state a charge is put in before a step runs.
type fixture struct {
	status           charges.Status // scheduled when empty
	attempt          int            // 1 when zero
	gateway          string         // the fake when empty
	voidRequested    bool
	authorizationRef string
	unknownPhase     gateway.Op
	firstDeclinedAgo time.Duration // first_declined_at this long before start, when set
	reviewReason     string
	reviewCode       charges.ReviewCode
	holdReleased     bool
}

// newCharge creates the period's charge as the scan does (Store.Create in
// a committed transaction) and then puts it in f's state with SQL, its
// authorize job dropped: each test enqueues or works the step it is about.
func (b *testBundle) newCharge(ctx context.Context, t *testing.T, f fixture) charges.Charge {
	t.Helper()
	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: periodKey, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard}}, b.clock.Now())
		if err != nil {
			return err
		}
		return dropJobs(ctx, tx, created)
	}))
	require.Len(t, created, 1)
	c := created[0]
	if f.status == "" {
		f.status = charges.Scheduled
	}
	if f.attempt == 0 {
		f.attempt = 1
	}
	if f.gateway == "" {
		f.gateway = b.gateway.Name()
	}
	var firstDeclined, released *time.Time
	if f.firstDeclinedAgo > 0 {
		firstDeclined = new(b.clock.Now().Add(-f.firstDeclinedAgo))
	}
	if f.holdReleased {
		released = new(b.clock.Now().Add(-time.Minute))
	}
	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2, attempt_count = $3, gateway = $4, void_requested = $5,
			authorization_ref = NULLIF($6, ''), unknown_phase = NULLIF($7, ''), first_declined_at = $8,
			review_reason = NULLIF($9, ''), hold_released_at = $10, review_code = NULLIF($11, '')
		WHERE id = $1`, c.ID, string(f.status), f.attempt, f.gateway, f.voidRequested, f.authorizationRef,
		string(f.unknownPhase), firstDeclined, f.reviewReason, released, string(f.reviewCode))
	require.NoError(t, err)
	b.fixtures[c.ID] = f.status
	return b.get(ctx, t, c.ID)
}

func (b *testBundle) get(ctx context.Context, t *testing.T, id uuid.UUID) charges.Charge {
	t.Helper()
	c, err := charges.Get(ctx, b.pool, id)
	require.NoError(t, err)
	return c
}

// requestVoid is a cancel of the subscription as the subscription side
// does it: the charges learn it in one transaction (StopSubscription)
// and Lock reports the subscription cancelled from then on.
func (b *testBundle) requestVoid(ctx context.Context, t *testing.T) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.pipeline.Store.StopSubscription(ctx, tx, b.subscriptionID, b.clock.Now())
	}))
	b.subs.update(func(s *charges.OwnerState) { s.Cancelled = true })
}

// changeCard is a payment-method change as the subscription side does it.
func (b *testBundle) changeCard(ctx context.Context, t *testing.T, token string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.PaymentMethodChanged(ctx, tx, b.subscriptionID, b.gateway.Name(), token, b.clock.Now())
		return err
	}))
	b.subs.update(func(s *charges.OwnerState) { s.Token = token })
}

// tripCircuit opens the fake gateway's circuit: one call that gets no
// answer opens a breaker that needs only one call. The call is forgotten.
func (b *testBundle) tripCircuit(ctx context.Context, t *testing.T) {
	t.Helper()
	b.pipeline.Gateways = fleet.New([]gateway.Gateway{b.gateway},
		fleet.Breaker{Window: time.Minute, MinCalls: 1, FailureRatio: 0, OpenFor: circuitOpenFor})
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnavailable)
	g, err := b.pipeline.Gateways.Gateway(b.gateway.Name())
	require.NoError(t, err)
	_, err = g.Lookup(ctx, gateway.LookupRequest{Request: gateway.Request{IdempotencyKey: "trip"}})
	require.ErrorIs(t, err, gateway.ErrUnavailable)
	require.True(t, b.pipeline.Gateways.CircuitOpen(b.gateway.Name()))
	b.gateway.LookupFunc = nil
	b.gateway.Reset()
}

// insertJob enqueues args in the test's transaction, to be worked with
// WorkJob later (after the clock moved, say).
func (b *testBundle) insertJob(ctx context.Context, t *testing.T, args river.JobArgs, opts *river.InsertOpts) *rivertype.JobRow {
	t.Helper()
	res, err := b.client.InsertTx(ctx, b.tx, args, opts)
	require.NoError(t, err)
	return res.Job
}

// rescue makes a job that River recorded done retryable again, as if the
// process had died after the step committed but before River recorded the
// job completed (River's rescuer then retries it).
func (b *testBundle) rescue(ctx context.Context, t *testing.T, job *rivertype.JobRow) *rivertype.JobRow {
	t.Helper()
	_, err := b.tx.Exec(ctx, `UPDATE river_job SET state = 'retryable', finalized_at = NULL WHERE id = $1`, job.ID)
	require.NoError(t, err)
	return job
}

func newWorker[T river.JobArgs](t *testing.T, b *testBundle, w river.Worker[T]) *rivertest.Worker[T, pgx.Tx] {
	t.Helper()
	return rivertest.NewWorker(t, b.driver, b.config, w)
}

// chargeJobs are the pipeline's job kinds.
var chargeJobs = []river.JobArgs{charges.AuthorizeArgs{}, charges.CaptureArgs{}, charges.VoidArgs{},
	charges.LookupArgs{}, charges.ReleaseHoldArgs{}}

// requireNextJobs requires that the steps committed exactly the jobs want,
// in the order they were inserted, with those args and to run at once, and
// no other job of the pipeline.
func (b *testBundle) requireNextJobs(ctx context.Context, t *testing.T, want ...river.JobArgs) []*rivertype.JobRow {
	t.Helper()
	var rows []*rivertype.JobRow
	if len(want) > 0 {
		expected := make([]rivertest.ExpectedJob, len(want))
		for i, args := range want {
			expected[i] = rivertest.ExpectedJob{Args: args}
		}
		rows = rivertest.RequireManyInserted(ctx, t, b.driver, expected)
		for i, row := range rows {
			args, err := json.Marshal(want[i])
			require.NoError(t, err)
			require.JSONEq(t, string(args), string(row.EncodedArgs), "args of job %d (%s)", i, row.Kind)
			require.Equal(t, rivertype.JobStateAvailable, row.State, "job %d (%s) runs at once", i, row.Kind)
			require.True(t, row.ScheduledAt.Equal(b.clock.Now()), "job %d (%s) is scheduled at %s, not now", i, row.Kind,
				row.ScheduledAt)
		}
	}
	for _, kind := range chargeJobs {
		wanted := false
		for _, args := range want {
			wanted = wanted || args.Kind() == kind.Kind()
		}
		if !wanted {
			rivertest.RequireNotInserted(ctx, t, b.driver, kind, nil)
		}
	}
	return rows
}

// requireCalls requires that the gateway received exactly want, written
// "op key token authorization" with the charge's business key as K and
// empty fields left out: "capture K:a1:capture auth_1".
func (b *testBundle) requireCalls(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for _, c := range b.gateway.Calls() {
		require.True(t, strings.HasPrefix(c.Key, b.chargeKey()+":") || c.Key == "trip", "key %q names the charge", c.Key)
		fields := []string{string(c.Op), "K" + strings.TrimPrefix(c.Key, b.chargeKey())}
		for _, f := range []string{c.Request.Token, c.Request.AuthorizationID} {
			if f != "" && c.Op != gatewaytest.OpLookup {
				fields = append(fields, f)
			}
		}
		got = append(got, strings.Join(fields, " "))
	}
	require.Equal(t, want, got, "gateway calls")
}

// requireSnoozed requires that the job was snoozed without spending an
// attempt, until a time in [lo, hi] from now; a charge that waits for its
// gateway shows that time (shown), a charge in review does not.
func (b *testBundle) requireSnoozed(t *testing.T, res *rivertest.WorkResult, c charges.Charge, lo, hi time.Duration, shown bool) {
	t.Helper()
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.Contains(t, []rivertype.JobState{rivertype.JobStateScheduled, rivertype.JobStateAvailable}, res.Job.State)
	require.Zero(t, res.Job.Attempt, "a snooze spends no River attempt")
	now, at := b.clock.Now(), res.Job.ScheduledAt
	require.False(t, at.Before(now.Add(lo)), "the job runs again at %s, at least %s after %s", at, lo, now)
	require.False(t, at.After(now.Add(hi)), "the job runs again at %s, at most %s after %s", at, hi, now)
	if !shown {
		require.Nil(t, c.NextAttemptAt, "next_attempt_at")
		return
	}
	require.NotNil(t, c.NextAttemptAt, "the charge shows when it tries again")
	require.True(t, c.NextAttemptAt.Equal(at), "the charge shows the job's time: %s, job %s", c.NextAttemptAt, at)
}

// Gateway answers.
var (
	succeeded   = gateway.Result{Status: gateway.StatusSucceeded, Reference: holdRef}
	softDecline = gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "insufficient_funds"}
	hardDecline = gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "stolen_card", Hard: true}
	refused     = gateway.Result{Status: gateway.StatusFailed}
)

// fakeSubscriptions is the subscription side of the pipeline: Lock locks
// the real row and returns the configured state; outcomes are recorded,
// as "declined", "paid(<charge status>)" and "failed(<charge status>)".
type fakeSubscriptions struct {
	mu       sync.Mutex
	current  charges.OwnerState
	recorded []string
}

func (s *fakeSubscriptions) update(fn func(*charges.OwnerState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.current)
}

func (s *fakeSubscriptions) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recorded...)
}

func (s *fakeSubscriptions) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = append(s.recorded, call)
}

func (s *fakeSubscriptions) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.OwnerState, error) {
	var found uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT id FROM subscriptions WHERE id = $1 FOR UPDATE`, id).Scan(&found); err != nil {
		return charges.OwnerState{}, fmt.Errorf("lock subscription: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, nil
}

func (s *fakeSubscriptions) ChargePaid(_ context.Context, _ pgx.Tx, c charges.Charge, _ bool) (*time.Time, error) {
	s.record("paid(" + string(c.Status) + ")")
	return nil, nil
}

func (s *fakeSubscriptions) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error {
	s.record("declined")
	return nil
}

func (s *fakeSubscriptions) ChargeFailed(_ context.Context, _ pgx.Tx, c charges.Charge) (*time.Time, error) {
	s.record("failed(" + string(c.Status) + ")")
	return nil, nil
}

// stepCase is one run of a step: the charge's state before it, the
// subscription as Lock reports it, what happens at the gateway (answers,
// and events that commit while the call is in flight), and the outcome.
type stepCase struct {
	name    string
	fixture fixture
	sub     func(*charges.OwnerState) // changes what Lock returns
	// The gateway's answers for the step's call; lookups answer from found
	// (by phase of the charge's attempt), not found otherwise.
	res       gateway.Result
	err       error
	found     map[gateway.Op]gateway.Result
	lookupErr error
	// meanwhile runs inside the gateway call, before it answers: a
	// subscription event that commits while the call is in flight.
	meanwhile   func(ctx context.Context, t *testing.T, b *testBundle)
	circuitOpen bool              // the gateway's breaker is open before the step
	jobAttempt  int               // the job's attempt, when not the charge's
	jobPhase    gateway.Op        // a reconcile job's phase, when not the charge's
	opts        *river.InsertOpts // e.g. MaxAttempts: 1, the job's last attempt
	createdAgo  time.Duration     // the job was created this long before it runs
	want        outcome
}

// lookups answers lookups of the charge's attempt from tc.found and
// tc.lookupErr.
func (tc stepCase) lookups(b *testBundle, attempt int) func(context.Context, gateway.LookupRequest) (gateway.Result, error) {
	if tc.lookupErr != nil {
		return gatewaytest.LookupAnswer(gateway.Result{}, tc.lookupErr)
	}
	ops := map[string]gateway.Result{}
	for phase, res := range tc.found {
		ops[b.key(attempt, phase)] = res
	}
	return gatewaytest.Found(ops)
}

// call is the gateway answer of tc's call, running tc.meanwhile first
// (River works a rivertest job on the test's goroutine).
func (tc stepCase) call(t *testing.T, b *testBundle) func(context.Context, gateway.Request) (gateway.Result, error) {
	return func(ctx context.Context, _ gateway.Request) (gateway.Result, error) {
		if tc.meanwhile != nil {
			tc.meanwhile(ctx, t, b)
		}
		return tc.res, tc.err
	}
}

// runStep prepares tc, works args through w and returns what River
// reported.
func runStep[T river.JobArgs](ctx context.Context, t *testing.T, b *testBundle, tc stepCase, w *rivertest.Worker[T, pgx.Tx],
	args T) (*rivertest.WorkResult, error) {
	t.Helper()
	if tc.sub != nil {
		b.subs.update(tc.sub)
	}
	if tc.circuitOpen {
		b.tripCircuit(ctx, t)
	}
	if tc.createdAgo > 0 {
		job := b.insertJob(ctx, t, args, tc.opts)
		b.clock.Advance(tc.createdAgo)
		return w.WorkJob(ctx, t, b.tx, job)
	}
	return w.Work(ctx, t, b.tx, args, tc.opts)
}

// The next job of attempt 1, given the charge id.
func captureJob(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.CaptureArgs{ChargeID: id, Attempt: 1}}
}

func voidJob(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.VoidArgs{ChargeID: id, Attempt: 1}}
}

func releaseHoldJob(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.ReleaseHoldArgs{ChargeID: id, Attempt: 1}}
}

func lookupJob(phase gateway.Op) func(uuid.UUID) []river.JobArgs {
	return func(id uuid.UUID) []river.JobArgs {
		return []river.JobArgs{charges.LookupArgs{ChargeID: id, Attempt: 1, Op: phase}}
	}
}

// Events that commit while a call is in flight.
var (
	cancelMeanwhile = func(ctx context.Context, t *testing.T, b *testBundle) { b.requestVoid(ctx, t) }
	cardMeanwhile   = func(ctx context.Context, t *testing.T, b *testBundle) { b.changeCard(ctx, t, newCard) }
)

// outcome is what a step leaves behind: the job's fate, the charge row, the
// calls the gateway and the subscription side received, and the jobs
// enqueued next.
type outcome struct {
	event            river.EventKind // river.EventKindJobCompleted when empty
	err              bool            // the worker returned an error: River retries the job
	status           charges.Status
	attempt          int // 1 when zero
	failureCode      string
	nextAttempt      *time.Duration    // a dunning date, this long from now
	wait             *[2]time.Duration // snoozed: the charge waits for its gateway until within [lo, hi] from now
	authorizationRef string
	unknownPhase     gateway.Op
	reviewReason     string                          // contained in the review reason
	reviewCode       charges.ReviewCode              // review_code; review_reason then starts with its sentence
	holdReleased     *time.Duration                  // hold_released_at this long before now; NULL when nil
	calls            []string                        // see requireCalls
	subCalls         []string                        // see fakeSubscriptions
	jobs             func(uuid.UUID) []river.JobArgs // the next jobs, given the charge id
}

// requireOutcome checks everything a step leaves behind.
func (b *testBundle) requireOutcome(ctx context.Context, t *testing.T, id uuid.UUID, res *rivertest.WorkResult, err error, want outcome) {
	t.Helper()
	if want.err {
		require.Error(t, err)
		require.NotErrorIs(t, err, &rivertest.PanicError{})
		want.event = river.EventKindJobFailed
	} else {
		require.NoError(t, err)
	}
	c := b.get(ctx, t, id)
	switch {
	case want.wait != nil:
		b.requireSnoozed(t, res, c, want.wait[0], want.wait[1], c.Status != charges.RequiresReview)
	case want.event == "":
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	default:
		require.Equal(t, want.event, res.EventKind)
	}
	if want.attempt == 0 {
		want.attempt = 1
	}
	require.Equal(t, want.status, c.Status, "status")
	b.requireEvents(ctx, t, id, c.Status)
	require.Equal(t, want.attempt, c.AttemptCount, "attempt_count")
	require.Equal(t, want.failureCode, c.FailureCode, "failure_code")
	switch {
	case want.nextAttempt != nil:
		require.NotNil(t, c.NextAttemptAt, "next_attempt_at")
		require.True(t, b.clock.Now().Add(*want.nextAttempt).Equal(*c.NextAttemptAt), "next_attempt_at %s, want now + %s",
			c.NextAttemptAt, *want.nextAttempt)
	case want.wait == nil:
		require.Nil(t, c.NextAttemptAt, "next_attempt_at")
	}
	require.Equal(t, want.authorizationRef, c.AuthorizationRef, "authorization_ref")
	require.Equal(t, want.unknownPhase, c.UnknownOp, "unknown_phase")
	require.Equal(t, want.reviewCode, c.ReviewCode, "review_code")
	switch {
	case want.reviewCode != "":
		require.True(t, strings.HasPrefix(c.ReviewReason, want.reviewCode.Sentence()), "review_reason %q", c.ReviewReason)
		require.Contains(t, c.ReviewReason, want.reviewReason, "review_reason")
	case want.reviewReason == "":
		require.Empty(t, c.ReviewReason, "review_reason")
	default:
		require.Contains(t, c.ReviewReason, want.reviewReason, "review_reason")
	}
	if want.holdReleased != nil {
		require.NotNil(t, c.HoldReleasedAt, "hold_released_at")
		require.True(t, b.clock.Now().Add(-*want.holdReleased).Equal(*c.HoldReleasedAt), "hold_released_at %s, want now - %s",
			c.HoldReleasedAt, *want.holdReleased)
	} else {
		require.Nil(t, c.HoldReleasedAt, "hold_released_at")
	}
	b.requireCalls(t, want.calls...)
	require.Equal(t, want.subCalls, b.subs.calls(), "subscription outcomes")
	var jobs []river.JobArgs
	if want.jobs != nil {
		jobs = want.jobs(id)
	}
	b.requireNextJobs(ctx, t, jobs...)
}
