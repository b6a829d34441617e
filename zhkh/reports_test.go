package zhkh_test

import (
	"context"
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

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/fsmtest"
	"github.com/rebill/rebill/zhkh"
	"github.com/rebill/rebill/zhkh/party"
	"github.com/rebill/rebill/zhkh/party/sim"
	"github.com/rebill/rebill/zhkh/party/testkit/partytest"
)

func TestReportMachine(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, zhkh.Machine, map[zhkh.Status][]zhkh.Status{
		zhkh.Pending:       {zhkh.Accepted, zhkh.Refused, zhkh.CancelPending, zhkh.Cancelled},
		zhkh.Accepted:      {zhkh.CancelPending},
		zhkh.CancelPending: {zhkh.Cancelled},
		zhkh.Refused:       nil,
		zhkh.Cancelled:     nil,
	})
	fsmtest.RequireNoLiterals(t, zhkh.Statuses, "charges/registry/sim/sim.go", "charges/gateway/sim", "zhkh/party/sim/sim.go")
}

// The deadline is the end of the Moscow day after the payment's, whatever
// the UTC date: a capture late in the Moscow evening is due two UTC
// midnights later, one just after Moscow's midnight a day later still.
func TestDueBy(t *testing.T) {
	t.Parallel()
	msk := time.FixedZone("MSK", 3*60*60)
	for _, tc := range []struct {
		name     string
		captured time.Time
		due      time.Time
	}{
		{"midday", time.Date(2026, 12, 5, 12, 0, 0, 0, msk), time.Date(2026, 12, 7, 0, 0, 0, 0, msk)},
		{"last minute of the Moscow day", time.Date(2026, 12, 5, 23, 59, 0, 0, msk), time.Date(2026, 12, 7, 0, 0, 0, 0, msk)},
		{"just past Moscow's midnight, still the day before in UTC", time.Date(2026, 12, 6, 0, 10, 0, 0, msk),
			time.Date(2026, 12, 8, 0, 0, 0, 0, msk)},
		{"across a month end", time.Date(2026, 11, 30, 15, 0, 0, 0, msk), time.Date(2026, 12, 2, 0, 0, 0, 0, msk)},
		{"across a year end", time.Date(2026, 12, 31, 9, 0, 0, 0, msk), time.Date(2027, 1, 2, 0, 0, 0, 0, msk)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, tc.due.Equal(zhkh.DueBy(tc.captured.UTC())), "due %s, got %s", tc.due, zhkh.DueBy(tc.captured).In(msk))
		})
	}
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type testBundle struct {
	pool     *pgxpool.Pool
	clock    *testClock
	fake     *partytest.Fake
	reporter *zhkh.Reporter
	client   *river.Client[pgx.Tx]
}

func newReporter(pool *pgxpool.Pool, clk *testClock, parties ...party.Party) *zhkh.Reporter {
	b := party.NewBalancer(parties, 5*time.Second)
	b.Now = clk.Now
	return &zhkh.Reporter{Pool: pool, Parties: b, Clock: clk, RetryBase: time.Second, RetryMax: time.Minute, Logger: zerolog.Nop()}
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := &testClock{now: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}
	fake := partytest.NewFake(t, "bank1")
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	r := newReporter(pool, clk, fake)
	r.Queue = client
	return &testBundle{pool: pool, clock: clk, fake: fake, reporter: r, client: client}
}

// capture records a housing payment's capture as the charge pipeline's
// owner does: the report and its job in the capture's transaction.
func (b *testBundle) capture(ctx context.Context, t *testing.T) zhkh.Capture {
	t.Helper()
	c := zhkh.Capture{ChargeID: uuid.New(), EnrollmentID: uuid.New(), Account: "75ДА533315", BillID: "bill-" + uuid.NewString()[:8],
		Amount: 512_300, Currency: "RUB", CapturedAt: b.clock.Now()}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.reporter.Captured(ctx, tx, c) }))
	return c
}

func (b *testBundle) refund(ctx context.Context, t *testing.T, c zhkh.Capture, amount int64) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.reporter.Refunded(ctx, tx, c.ChargeID, amount, b.clock.Now())
	}))
}

// work runs one job of args through r's workers, as River would; its
// event kind says whether it completed or snoozed.
func work[A river.JobArgs](ctx context.Context, t *testing.T, b *testBundle, w river.Worker[A], args A) river.EventKind {
	t.Helper()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	res, err := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, w).Work(ctx, t, tx, args, nil)
	require.NoError(t, err)
	return res.EventKind
}

func (b *testBundle) report(ctx context.Context, t *testing.T, c zhkh.Capture) zhkh.Report {
	t.Helper()
	r, err := zhkh.OfCharge(ctx, b.pool, c.ChargeID)
	require.NoError(t, err)
	return r
}

func (b *testBundle) jobs(ctx context.Context, t *testing.T, kind string) []*rivertype.JobRow {
	t.Helper()
	res, err := b.client.JobList(ctx, river.NewJobListParams().Kinds(kind).First(100))
	require.NoError(t, err)
	return res.Jobs
}

// A report whose answer was lost is looked up by its id, found accepted
// and recorded so: it is never sent again, and a rerun of its job calls
// nobody.
func TestLostAnswerIsLookedUpNotResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.fake.ReportFunc = partytest.Reports(party.ErrUnknownOutcome)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusAccepted, "", nil)
	rw := &zhkh.ReportWorker{Reporter: b.reporter}
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	require.Equal(t, zhkh.Accepted, b.report(ctx, t, c).Status)
	require.Len(t, b.fake.CallsOf("report"), 1)
	require.Len(t, b.fake.CallsOf("lookup"), 1)
	p := b.fake.CallsOf("report")[0].Payment
	require.Equal(t, party.Payment{ReportID: id, Account: c.Account, BillID: c.BillID, Amount: c.Amount, Currency: "RUB",
		PaidAt: c.CapturedAt, PaymentRef: c.EnrollmentID.String() + ":" + c.BillID}, p)

	work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id})
	require.Len(t, b.fake.Calls(), 2, "a rerun of a settled report calls nobody")
}

// A run that sent the report and lost its answer, and could not look it
// up, leaves it sent: the next run looks it up before anything else and,
// finding it accepted, sends nothing.
func TestRerunAfterALostAnswerLooksUpBeforeAnyResend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	rw := &zhkh.ReportWorker{Reporter: b.reporter}
	b.fake.ReportFunc = partytest.Reports(party.ErrUnknownOutcome)
	b.fake.LookupFunc = partytest.LooksUp("", "", party.ErrUnavailable)
	require.Equal(t, river.EventKindJobSnoozed, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	require.Equal(t, zhkh.Pending, b.report(ctx, t, c).Status)
	require.NotNil(t, b.report(ctx, t, c).SentAt)

	b.fake.LookupFunc = partytest.LooksUp(party.StatusAccepted, "", nil)
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	require.Equal(t, zhkh.Accepted, b.report(ctx, t, c).Status)
	require.Len(t, b.fake.CallsOf("report"), 1, "found by look-up: never sent again")
}

// A report that never reached the party (the look-up finds nothing) is
// sent again under the same id.
func TestReportNotFoundIsSentAgainUnderTheSameID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	rw := &zhkh.ReportWorker{Reporter: b.reporter}
	b.fake.ReportFunc = partytest.Reports(party.ErrUnavailable)
	require.Equal(t, river.EventKindJobSnoozed, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}), "an outage waits")
	b.fake.ReportFunc = partytest.Reports(nil)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusNotFound, "", nil)
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	require.Equal(t, zhkh.Accepted, b.report(ctx, t, c).Status)
	ops := []string{}
	for _, call := range b.fake.Calls() {
		ops = append(ops, call.Op)
		require.Equal(t, id, call.ReportID)
	}
	require.Equal(t, []string{"report", "lookup", "report"}, ops)
}

// The capture's hook run twice (a rerun of the capture's transaction
// logic, or a second hook) stores one report and enqueues one job.
func TestCapturedTwiceIsOneReportAndOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.reporter.Captured(ctx, tx, c) }))
	require.Len(t, b.jobs(ctx, t, zhkh.ReportArgs{}.Kind()), 1)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM zhkh_reports WHERE charge_id = $1`, c.ChargeID).Scan(&n))
	require.Equal(t, 1, n)
}

// A refusal leaves the money where it is and puts the report before a
// person with GIS ZhKH's reason; nothing is annulled or sent again.
func TestRefusalGoesToReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.fake.ReportFunc = partytest.Reports(&party.RefusedError{Party: "bank1", Reason: "payment document not found"})
	rw := &zhkh.ReportWorker{Reporter: b.reporter}
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	r := b.report(ctx, t, c)
	require.Equal(t, zhkh.Refused, r.Status)
	require.Contains(t, r.ReviewReason, "payment document not found")
	review, err := zhkh.Review(ctx, b.pool, "", 10)
	require.NoError(t, err)
	require.Len(t, review, 1)
	require.Equal(t, id, review[0].ReportID)
	counts, err := zhkh.Count(ctx, b.pool, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.InReview)

	b.refund(ctx, t, c, 100)
	require.Contains(t, b.report(ctx, t, c).ReviewReason, "payment document not found", "a refund in part keeps the refusal's reason")
	b.refund(ctx, t, c, c.Amount-100)
	require.Equal(t, zhkh.Refused, b.report(ctx, t, c).Status, "GIS ZhKH never held it: nothing to annul")
	require.Empty(t, b.jobs(ctx, t, zhkh.CancelArgs{}.Kind()))
	require.NoError(t, zhkh.Reviewed(ctx, b.pool, id, "support@example", b.clock.Now()))
	counts, err = zhkh.Count(ctx, b.pool, b.clock.Now())
	require.NoError(t, err)
	require.Zero(t, counts.InReview)
	require.Len(t, b.fake.CallsOf("report"), 1)
}

// A full refund annuls the report once: a second refund event and a rerun
// of the annulment change nothing.
func TestRefundAnnulsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.fake.ReportFunc = partytest.Reports(nil)
	rw, cw := &zhkh.ReportWorker{Reporter: b.reporter}, &zhkh.CancelWorker{Reporter: b.reporter}
	work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id})
	require.Equal(t, zhkh.Accepted, b.report(ctx, t, c).Status)

	b.refund(ctx, t, c, 200_000)
	r := b.report(ctx, t, c)
	require.Equal(t, zhkh.Accepted, r.Status, "a part refunded leaves the information standing")
	require.Contains(t, r.ReviewReason, "refunded in part")
	require.Empty(t, b.jobs(ctx, t, zhkh.CancelArgs{}.Kind()))

	b.refund(ctx, t, c, c.Amount-200_000)
	require.Equal(t, zhkh.CancelPending, b.report(ctx, t, c).Status)
	b.refund(ctx, t, c, 1)
	require.Len(t, b.jobs(ctx, t, zhkh.CancelArgs{}.Kind()), 1, "annulled once")

	b.fake.CancelFunc = partytest.Cancels(nil)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusCancelled, "", nil)
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id}))
	require.Equal(t, zhkh.Cancelled, b.report(ctx, t, c).Status)
	work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id})
	require.Len(t, b.fake.CallsOf("cancel"), 1, "a rerun of a settled annulment calls nobody")
}

// An annulment whose answer was lost is confirmed by look-up; one the
// party shows still standing is asked again later.
func TestAnnulmentIsConfirmedByLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.fake.ReportFunc = partytest.Reports(nil)
	work(ctx, t, b, &zhkh.ReportWorker{Reporter: b.reporter}, zhkh.ReportArgs{ReportID: id})
	b.refund(ctx, t, c, c.Amount)
	cw := &zhkh.CancelWorker{Reporter: b.reporter}
	b.fake.CancelFunc = partytest.Cancels(party.ErrUnknownOutcome)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusAccepted, "", nil)
	require.Equal(t, river.EventKindJobSnoozed, work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id}))
	require.Equal(t, zhkh.CancelPending, b.report(ctx, t, c).Status)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusCancelled, "", nil)
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id}))
	require.Equal(t, zhkh.Cancelled, b.report(ctx, t, c).Status)
}

// A payment refunded before its report was ever sent is told to nobody.
func TestRefundedBeforeReportedIsNeverSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.refund(ctx, t, c, c.Amount)
	work(ctx, t, b, &zhkh.CancelWorker{Reporter: b.reporter}, zhkh.CancelArgs{ReportID: id})
	work(ctx, t, b, &zhkh.ReportWorker{Reporter: b.reporter}, zhkh.ReportArgs{ReportID: id})
	require.Equal(t, zhkh.Cancelled, b.report(ctx, t, c).Status)
	require.Empty(t, b.fake.Calls())
}

// A report still pending at its deadline is overdue; once the party holds
// it, it is not.
func TestOverdueReportsAreCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	due := zhkh.DueBy(c.CapturedAt)
	require.True(t, due.Equal(b.report(ctx, t, c).DueAt))
	count := func(at time.Time) int64 {
		counts, err := zhkh.Count(ctx, b.pool, at)
		require.NoError(t, err)
		return counts.Overdue
	}
	require.Zero(t, count(due.Add(-time.Second)))
	require.Equal(t, int64(1), count(due))
	b.fake.ReportFunc = partytest.Reports(nil)
	work(ctx, t, b, &zhkh.ReportWorker{Reporter: b.reporter}, zhkh.ReportArgs{ReportID: zhkh.IDOf(c)})
	require.Zero(t, count(due.Add(time.Hour)))
}

// Two nodes running the same report at once, through the simulated party
// losing every answer, leave one report in its ledger, accepted.
func TestTwoNodesReportOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := sim.Sim{Pool: b.pool, Names: []string{"twonodes"}}
	lose := true
	_, err := s.SetFaults(ctx, "twonodes", sim.FaultsPatch{LoseResponse: &lose})
	require.NoError(t, err)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	var wg sync.WaitGroup
	for range 2 {
		node := newReporter(b.pool, b.clock, s.Parties()...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := b.pool.Begin(ctx)
			if !assertNoError(t, err) {
				return
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, river.Worker[zhkh.ReportArgs](&zhkh.ReportWorker{Reporter: node})).
				Work(ctx, t, tx, zhkh.ReportArgs{ReportID: id}, nil)
			assertNoError(t, err)
		}()
	}
	wg.Wait()
	ledger, err := s.Ledger(ctx)
	require.NoError(t, err)
	var mine []sim.LedgerEntry
	for _, e := range ledger {
		if e.ReportID == id {
			mine = append(mine, e)
		}
	}
	require.Len(t, mine, 1)
	require.Equal(t, "accepted", mine[0].Status)
	require.Equal(t, zhkh.Accepted, b.report(ctx, t, c).Status)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A refund that lands while a run is about to send the report stops the
// send: the send is recorded under the report's status guard.
func TestRefundBeforeTheSendStopsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	rw := &zhkh.ReportWorker{Reporter: b.reporter}
	b.fake.ReportFunc = partytest.Reports(party.ErrUnavailable)
	work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id})
	b.fake.LookupFunc = func(context.Context, string) (party.Status, string, error) {
		b.refund(ctx, t, c, c.Amount) // between the run's read and its send
		return party.StatusNotFound, "", nil
	}
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, rw, zhkh.ReportArgs{ReportID: id}))
	require.Len(t, b.fake.CallsOf("report"), 1, "not sent again once refunded")
	require.Equal(t, zhkh.CancelPending, b.report(ctx, t, c).Status)
}

// An annulment that finds nothing at the party while the report's last
// send may still be on its way waits until it cannot be, then is done.
func TestAnnulmentWaitsOutASendInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	id := zhkh.IDOf(c)
	b.fake.ReportFunc = partytest.Reports(party.ErrUnknownOutcome)
	b.fake.LookupFunc = partytest.LooksUp("", "", party.ErrUnavailable)
	work(ctx, t, b, &zhkh.ReportWorker{Reporter: b.reporter}, zhkh.ReportArgs{ReportID: id})
	b.refund(ctx, t, c, c.Amount)
	cw := &zhkh.CancelWorker{Reporter: b.reporter}
	b.fake.CancelFunc = partytest.Cancels(nil)
	b.fake.LookupFunc = partytest.LooksUp(party.StatusNotFound, "", nil)
	require.Equal(t, river.EventKindJobSnoozed, work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id}))
	require.Equal(t, zhkh.CancelPending, b.report(ctx, t, c).Status)
	b.clock.Set(b.clock.Now().Add(11 * time.Second)) // past two call timeouts (5 s)
	require.Equal(t, river.EventKindJobCompleted, work(ctx, t, b, cw, zhkh.CancelArgs{ReportID: id}))
	require.Equal(t, zhkh.Cancelled, b.report(ctx, t, c).Status)
}

// A database restored from before a report forgot it and the charge: the
// charge re-created under another id is reported under the id the party
// already holds (of the bill's charge key), so the party takes it as a
// replay, not a second payment.
func TestReportOfAChargeRecreatedAfterARestoreKeepsItsID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.capture(ctx, t)
	first, err := zhkh.OfCharge(ctx, b.pool, c.ChargeID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DELETE FROM zhkh_reports WHERE charge_id = $1`, c.ChargeID)
	require.NoError(t, err)

	again := c
	again.ChargeID = uuid.New()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.reporter.Captured(ctx, tx, again) }))
	second, err := zhkh.OfCharge(ctx, b.pool, again.ChargeID)
	require.NoError(t, err)
	require.Equal(t, first.ReportID, second.ReportID)
}
