package books_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
	"github.com/rebill/rebill/testkit/testsupport"
)

const gw = "simr"

// day is the UTC day the tests reconcile; the clock stands two days on.
var day = time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)

type testBundle struct {
	pool *pgxpool.Pool
	rec  *books.Reconciler
	sub  uuid.UUID
}

func setup(t *testing.T) testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	g := opstest.Gateway(t, pool, gw)
	rec := &books.Reconciler{Pool: pool, Read: pool, Gateways: map[string]gateway.Gateway{gw: g},
		Clock: testsupport.NewClock(day.Add(50 * time.Hour)), Days: 7, Logger: zerolog.New(io.Discard)}
	return testBundle{pool: pool, rec: rec, sub: opstest.Subscription(t, pool, gw, day.AddDate(0, -6, 0))}
}

// period returns the start of the subscription's n-th period: one charge
// per period, at noon of day.
func period(n int) time.Time { return day.AddDate(0, -n, 0) }

func TestCleanDayIsMatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for n := range 3 {
		opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(n), Gateway: gw,
			UpdatedAt: day.Add(time.Duration(n+1) * time.Hour), Amount: int64(1000 + n)})
	}
	// A soft decline that day and a charge captured the day before are no
	// discrepancy either.
	_, declined := opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(3), Gateway: gw,
		Status: "declined", UpdatedAt: day.Add(5 * time.Hour)})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: declined, Op: "authorize", Status: "declined", At: day.Add(5 * time.Hour)})
	opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(4), Gateway: gw, UpdatedAt: day.Add(-time.Hour)})

	pending, err := books.Get(ctx, b.pool, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Pending, pending.Status)

	res, err := b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status, "%+v", res.Discrepancies)
	require.Empty(t, res.Discrepancies)
	require.Equal(t, 7, res.Operations)
	require.NotNil(t, res.CheckedAt)
}

func TestEachDiscrepancyKindIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	at := day.Add(10 * time.Hour)
	ids := map[books.Kind]uuid.UUID{}

	// Settled as succeeded by rebill; the gateway never captured it.
	ids[books.MissingAtGateway], _ = opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub,
		PeriodStart: period(0), Gateway: gw, Status: "succeeded", UpdatedAt: at})
	// A capture under a key that names no charge of rebill's.
	ghost := opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: uuid.NewString() + ":2026-11-01", Op: "capture", At: at})
	// Captured for less than the charge.
	var key string
	ids[books.AmountMismatch], key = opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub,
		PeriodStart: period(1), Gateway: gw, Status: "succeeded", UpdatedAt: at})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "authorize", At: at})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "capture", Amount: 999, At: at})
	// Captured at the gateway while rebill says it failed.
	ids[books.StatusMismatch], key = opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub,
		PeriodStart: period(2), Gateway: gw, Status: "failed", UpdatedAt: at})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "authorize", At: at})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "capture", At: at})
	// Captured twice: attempt 1 (filed the day before) and attempt 2.
	ids[books.DuplicateCapture], key = opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub,
		PeriodStart: period(3), Gateway: gw, Status: "succeeded", Attempt: 2, UpdatedAt: at})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Attempt: 1, Op: "capture", At: day.Add(-time.Hour)})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Attempt: 2, Op: "capture", At: at})

	res, err := b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Discrepancies, res.Status)
	got := map[books.Kind][]books.Discrepancy{}
	for _, d := range res.Discrepancies {
		got[d.Kind] = append(got[d.Kind], d)
	}
	require.Len(t, got, 5, "%+v", res.Discrepancies)
	for kind, want := range ids {
		require.Len(t, got[kind], 1, "%s: %+v", kind, got[kind])
		require.NotNil(t, got[kind][0].ChargeID, kind)
		require.Equal(t, want, *got[kind][0].ChargeID, kind)
	}
	require.Len(t, got[books.UnknownAtRebill], 1)
	require.Nil(t, got[books.UnknownAtRebill][0].ChargeID)
	require.Equal(t, ghost, got[books.UnknownAtRebill][0].GatewayReference)

	// A second run of the same day (a job run twice) records nothing more.
	again, err := b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	require.Equal(t, res.Discrepancies, again.Discrepancies)
	var rows int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM reconciliation_discrepancies`).Scan(&rows))
	require.Equal(t, 5, rows)
}

func TestCaptureFiledUnderAnotherDayIsNotMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// rebill recorded the success just after midnight; the gateway stamped
	// its capture just before.
	_, key := opstest.InsertCharge(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(0), Gateway: gw,
		Status: "succeeded", UpdatedAt: day.Add(time.Minute)})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "capture", At: day.Add(-time.Minute)})
	res, err := b.rec.RunDay(context.Background(), gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status, "%+v", res.Discrepancies)
}

func TestMissedDaysAreCaughtUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.rec.Jobs = client
	listDays := func() []string {
		rows, err := b.pool.Query(ctx, `SELECT args->>'day' FROM river_job WHERE kind = 'reconcile_day' AND state = 'available' ORDER BY 1`)
		require.NoError(t, err)
		days, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return days
	}

	// The clock stands on day+2 02:00: the finished days of the last
	// week are due, today is not.
	n, err := b.rec.Enqueue(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	days := listDays()
	require.Len(t, days, 7)
	require.Equal(t, day.AddDate(0, 0, 1).Format(time.DateOnly), days[6])

	// Enqueuing again adds nothing while they wait.
	n, err = b.rec.Enqueue(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	require.Len(t, listDays(), 7)

	// Once a day has a result it is not enqueued again; the others are.
	_, err = b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'reconcile_day'`)
	require.NoError(t, err)
	_, err = b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	_, err = b.rec.Enqueue(ctx)
	require.NoError(t, err)
	days = listDays()
	require.Len(t, days, 6)
	require.NotContains(t, days, day.Format(time.DateOnly))
}

func TestDiscrepanciesRaiseTheAlertMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rec.Gateways = map[string]gateway.Gateway{"simr-metrics": b.rec.Gateways[gw]}
	// Two operations no charge of rebill's knows about.
	for range 2 {
		opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: uuid.NewString() + ":2026-11-01", Op: "capture",
			At: day.Add(time.Hour)})
	}
	before := value(t, metrics.ReconciliationDiscrepancies.WithLabelValues("simr-metrics", "unknown_at_rebill"))
	_, err := b.rec.RunDay(context.Background(), "simr-metrics", day)
	require.NoError(t, err)
	require.Equal(t, before+2, value(t, metrics.ReconciliationDiscrepancies.WithLabelValues("simr-metrics", "unknown_at_rebill")))
	require.Equal(t, 2.0, value(t, metrics.ReconciliationOpen.WithLabelValues("simr-metrics")))
	require.Equal(t, float64(day.Unix()), value(t, metrics.ReconciliationLastDay.WithLabelValues("simr-metrics")))
}

// value reads a counter's or gauge's current value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// A day with bill traffic matches like a day of periods: every operation
// of an enrollment's bill charge, whatever ':' its bill id holds, belongs
// to that charge and none is reported unknown.
func TestBillOperationsAreMatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enr := opstest.Enrollment(t, b.pool, gw, day.AddDate(0, -1, 0))
	for i, billID := range []string{"2026-11", "inv:77:2026-11"} {
		opstest.Paid(t, b.pool, opstest.Charge{Enrollment: enr, BillID: billID, PeriodStart: day.Add(-time.Hour), Gateway: gw,
			UpdatedAt: day.Add(time.Duration(i+1) * time.Hour), Amount: int64(5000 + i)})
	}
	// A bill's capture for less than its charge is still found wrong.
	id, key := opstest.InsertCharge(t, b.pool, opstest.Charge{Enrollment: enr, BillID: "inv:77:2026-12", PeriodStart: day,
		Gateway: gw, Status: "succeeded", UpdatedAt: day.Add(5 * time.Hour)})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "capture", Amount: 999, At: day.Add(5 * time.Hour)})

	res, err := b.rec.RunDay(context.Background(), gw, day)
	require.NoError(t, err)
	require.Equal(t, 5, res.Operations)
	require.Len(t, res.Discrepancies, 1, "%+v", res.Discrepancies)
	require.Equal(t, books.AmountMismatch, res.Discrepancies[0].Kind)
	require.Equal(t, id, *res.Discrepancies[0].ChargeID)
}

// TestCatchUpLogsOneInfoLine runs the tick and its day jobs on River, as a
// start does: one info line sums up the days enqueued, each day's result
// is a debug line, and a discrepancy is still a warning.
func TestCatchUpLogsOneInfoLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var logs testsupport.LockedBuffer
	b.rec.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
	b.rec.Gateways[gw+"-second"] = opstest.Gateway(t, b.pool, gw+"-second")
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: uuid.NewString() + ":2026-11-01", Op: "capture",
		At: day.Add(time.Hour)})

	jobs, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.rec.Jobs = jobs
	workers := river.NewWorkers()
	books.Register(workers, b.rec)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler),
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}, Workers: workers})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	_, err = client.Insert(ctx, books.TickArgs{}, nil)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM reconciliation_days`).Scan(&done))
		return done == 14
	}, 30*time.Second, 50*time.Millisecond, "both gateways' 7 days reconciled")

	levels := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry struct {
			Level, Message string
			Days           int
		}
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		levels[entry.Level] = append(levels[entry.Level], entry.Message)
		if entry.Message == "days to reconcile enqueued" {
			require.Equal(t, 14, entry.Days)
		}
	}
	require.Equal(t, []string{"days to reconcile enqueued"}, levels["info"])
	require.Len(t, levels["debug"], 14, "a debug line per gateway-day")
	require.Equal(t, []string{"reconciliation discrepancy"}, levels["warn"], "the unknown operation, on the day of gateway %s", gw)
}

// downGateway fails every call while down, counting the calls.
type downGateway struct {
	gateway.Gateway
	down  atomic.Bool
	calls atomic.Int32
}

func (g *downGateway) Operations(ctx context.Context, day time.Time) ([]gateway.Result, error) {
	g.calls.Add(1)
	if g.down.Load() {
		return nil, fmt.Errorf("%s: %w", g.Name(), gateway.ErrUnavailable)
	}
	return g.Gateway.Operations(ctx, day)
}

// A day whose gateway fails every call is retried at waits that double
// from a minute to an hour (on River's time, whatever the client's retry
// policy, which is seconds in dev mode): its ten attempts span hours, not
// the minute in which seven days were discarded.
func TestFailedDayBacksOff(t *testing.T) {
	t.Parallel()
	w := &books.DayWorker{}
	attempted := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	job := &river.Job[books.DayArgs]{JobRow: &rivertype.JobRow{AttemptedAt: &attempted}}
	var total time.Duration
	for n := 1; n < 10; n++ {
		ceiling := min(time.Hour, time.Minute<<(n-1))
		wait := w.NextRetry(job).Sub(attempted)
		require.GreaterOrEqual(t, wait, ceiling/2, "retry %d", n)
		require.LessOrEqual(t, wait, ceiling, "retry %d", n)
		total += wait
		job.Errors = append(job.Errors, rivertype.AttemptError{Attempt: n, Error: "gateway unavailable"})
	}
	require.Greater(t, total, 2*time.Hour, "ten attempts span hours")
}

// A day River discarded while its gateway was down is not lost: the next
// tick enqueues it again (a discarded job does not hold the day's
// uniqueness), and it is reconciled once the gateway is back.
func TestDiscardedDayIsCaughtUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := &downGateway{Gateway: b.rec.Gateways[gw]}
	g.down.Store(true)
	b.rec.Gateways = map[string]gateway.Gateway{gw: g}
	b.rec.Days = 1 // the day only
	b.rec.Clock = testsupport.NewClock(day.Add(24*time.Hour + books.Settle + time.Minute))
	workers := river.NewWorkers()
	books.Register(workers, b.rec)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.DiscardHandler),
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}, Workers: workers})
	require.NoError(t, err)
	b.rec.Jobs = client
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	jobState := func() string {
		var state string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT coalesce(string_agg(state::text, ',' ORDER BY id), '') FROM river_job
			WHERE kind = 'reconcile_day'`).Scan(&state))
		return state
	}

	// The day's last attempt fails: River discards the job.
	_, err = client.Insert(ctx, books.DayArgs{Gateway: gw, Day: day.Format(time.DateOnly)}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return jobState() == "discarded" }, 20*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, g.calls.Load())
	res, err := books.Get(ctx, b.pool, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Pending, res.Status)

	// The gateway is back; the next tick catches the day up.
	g.down.Store(false)
	_, err = client.Insert(ctx, books.TickArgs{}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err = books.Get(ctx, b.pool, gw, day)
		require.NoError(t, err)
		return res.Status != books.Pending
	}, 20*time.Second, 20*time.Millisecond, "the discarded day is reconciled")
	require.Equal(t, books.Matched, res.Status)
	require.Eventually(t, func() bool { return jobState() == "discarded,completed" }, 20*time.Second, 20*time.Millisecond,
		"a second job for the day, beside the discarded one")
	require.EqualValues(t, 2, g.calls.Load())
}

// A gateway whose circuit is open (its calls failing, decision 20) is not
// asked for its day: the day stays pending and is retried later.
func TestPausedGatewayIsNotAsked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := &downGateway{Gateway: b.rec.Gateways[gw]}
	b.rec.Gateways = map[string]gateway.Gateway{gw: g}
	paused := true
	b.rec.Paused = func(name string) bool { return name == gw && paused }
	_, err := b.rec.RunDay(ctx, gw, day)
	require.ErrorIs(t, err, books.ErrPaused)
	require.Zero(t, g.calls.Load())
	res, err := books.Get(ctx, b.pool, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Pending, res.Status)

	paused = false
	res, err = b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status)
	require.EqualValues(t, 1, g.calls.Load())
}

// Refunds are matched with the gateway's refund operations: one that
// agrees is no discrepancy; one rebill holds succeeded that the gateway
// never made, one the gateway made under a key rebill does not know, one
// of another amount, and one rebill holds failed that the gateway made
// each are, with the charge they concern.
func TestRefundsAreMatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	at := day.Add(10 * time.Hour)
	paid := func(n int) (uuid.UUID, string) {
		return opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(n), Gateway: gw,
			UpdatedAt: day.Add(-24 * time.Hour)})
	}
	refund := func(id uuid.UUID, key string, n int, amount int64, status string, gatewayAmount int64) {
		rk := opstest.InsertRefund(t, b.pool, opstest.Refund{ChargeID: id, ChargeKey: key, N: n, Amount: amount,
			Gateway: gw, Status: status, At: at})
		if gatewayAmount > 0 {
			opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "refund", Key: rk, Amount: gatewayAmount, At: at})
		}
	}
	// Two partial refunds that agree.
	clean, key := paid(0)
	refund(clean, key, 1, 300, "succeeded", 300)
	refund(clean, key, 2, 700, "succeeded", 700)
	want := map[books.Kind]uuid.UUID{}
	// Succeeded in rebill, never made at the gateway.
	id, key := paid(1)
	want[books.RefundMissingAtGateway] = id
	refund(id, key, 1, 500, "succeeded", 0)
	// Made at the gateway for another amount.
	id, key = paid(2)
	want[books.RefundAmountMismatch] = id
	refund(id, key, 1, 400, "succeeded", 450)
	// Failed in rebill, made at the gateway.
	id, key = paid(3)
	want[books.RefundStatusMismatch] = id
	refund(id, key, 1, 1000, "failed", 1000)
	// Still unknown in rebill, made at the gateway: its look-up settles
	// it, no discrepancy.
	id, key = paid(4)
	refund(id, key, 1, 1000, "unknown", 1000)
	// A refund under a key no refund of rebill's has.
	_, key = paid(5)
	ghost := opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "refund",
		Key: key + ":r9:refund", Amount: 100, At: at})

	res, err := b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	got := map[books.Kind][]books.Discrepancy{}
	for _, d := range res.Discrepancies {
		got[d.Kind] = append(got[d.Kind], d)
	}
	require.Len(t, got, 4, "%+v", res.Discrepancies)
	for kind, id := range want {
		require.Len(t, got[kind], 1, "%s: %+v", kind, got[kind])
		require.Equal(t, id, *got[kind][0].ChargeID, kind)
	}
	require.Len(t, got[books.RefundUnknownAtRebill], 1)
	require.Equal(t, ghost, got[books.RefundUnknownAtRebill][0].GatewayReference)
	require.Contains(t, got[books.RefundAmountMismatch][0].Detail, "450")

	// The recorded kinds pass the table's CHECK and read back.
	saved, err := books.Get(ctx, b.pool, gw, day)
	require.NoError(t, err)
	require.Equal(t, res.Discrepancies, saved.Discrepancies)
}

// A refund the gateway filed under the day before is found by its key,
// not called missing.
func TestRefundFiledUnderAnotherDayIsNotMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id, key := opstest.Paid(t, b.pool, opstest.Charge{Subscription: b.sub, PeriodStart: period(0), Gateway: gw,
		UpdatedAt: day.Add(-48 * time.Hour)})
	rk := opstest.InsertRefund(t, b.pool, opstest.Refund{ChargeID: id, ChargeKey: key, Amount: 600, Gateway: gw,
		At: day.Add(time.Hour)})
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: gw, ChargeKey: key, Op: "refund", Key: rk, Amount: 600, At: day.Add(-time.Hour)})
	res, err := b.rec.RunDay(ctx, gw, day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status, "%+v", res.Discrepancies)
}
