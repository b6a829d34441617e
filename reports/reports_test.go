package reports_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/reports"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
)

var day = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestDailyReportSumsTheDayByGatewayAndCurrency(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	sub := opstest.Subscription(t, pool, "sim1", day.AddDate(-1, 0, 0))
	n := 0
	charge := func(gw, currency, status string, amount int64, at time.Time) (uuid.UUID, string) {
		n++
		return opstest.InsertCharge(t, pool, opstest.Charge{Subscription: sub, PeriodStart: day.AddDate(0, 0, -n), Gateway: gw,
			Currency: currency, Status: status, Amount: amount, UpdatedAt: at})
	}
	refund := func(id uuid.UUID, key, gw, currency string, n int, amount int64, status string, at time.Time) {
		opstest.InsertRefund(t, pool, opstest.Refund{ChargeID: id, ChargeKey: key, N: n, Amount: amount, Currency: currency,
			Gateway: gw, Status: status, At: at})
	}
	charge("sim1", "RUB", "succeeded", 1000, day.Add(time.Hour))
	charge("sim1", "RUB", "succeeded", 2001, day.Add(23*time.Hour+59*time.Minute))
	charge("sim1", "USD", "succeeded", 500, day.Add(2*time.Hour))
	charge("sim1", "RUB", "declined", 700, day.Add(3*time.Hour))
	charge("sim2", "RUB", "failed", 700, day.Add(3*time.Hour))
	charge("sim2", "RUB", "voided", 700, day.Add(4*time.Hour))
	// Not that day, or not settled: left out.
	earlier, earlierKey := charge("sim1", "RUB", "succeeded", 9999, day.Add(-time.Second))
	charge("sim1", "RUB", "succeeded", 9999, day.Add(24*time.Hour))
	charge("sim1", "RUB", "authorizing", 9999, day.Add(time.Hour))
	// Refunds count on the day they succeeded, whenever their charge was
	// captured; a failed one, or one of another day, does not; a gateway
	// and currency with refunds only gets a row of its own.
	refund(earlier, earlierKey, "sim1", "RUB", 1, 400, "succeeded", day.Add(5*time.Hour))
	refund(earlier, earlierKey, "sim1", "RUB", 2, 600, "succeeded", day.Add(6*time.Hour))
	refund(earlier, earlierKey, "sim1", "RUB", 3, 50, "failed", day.Add(6*time.Hour))
	refund(earlier, earlierKey, "sim1", "RUB", 4, 70, "succeeded", day.Add(-time.Hour))
	refund(earlier, earlierKey, "sim1", "RUB", 5, 80, "unknown", day.Add(7*time.Hour))
	eur, eurKey := charge("sim3", "EUR", "succeeded", 3000, day.Add(-48*time.Hour))
	refund(eur, eurKey, "sim3", "EUR", 1, 3000, "succeeded", day.Add(8*time.Hour))
	rates := func(gw, currency string) int64 {
		if gw == "sim1" && currency == "RUB" {
			return 150
		}
		return 0
	}
	rep, err := reports.Build(context.Background(), pool, day.Add(13*time.Hour), rates)
	require.NoError(t, err)
	require.Equal(t, day, rep.Date)
	require.Equal(t, []reports.Row{
		{Gateway: "sim1", Currency: "RUB", CapturedCount: 2, CapturedAmount: 3001, DeclinedCount: 1, CommissionBPS: 150,
			Commission: 46, RefundedCount: 2, RefundedAmount: 1000}, // 45.015, rounded up
		{Gateway: "sim1", Currency: "USD", CapturedCount: 1, CapturedAmount: 500},
		{Gateway: "sim2", Currency: "RUB", FailedCount: 1, VoidedCount: 1},
		{Gateway: "sim3", Currency: "EUR", RefundedCount: 1, RefundedAmount: 3000},
	}, rep.Rows)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteCSV(&buf))
	require.Equal(t, "date,gateway,currency,captured_count,captured_amount,declined_count,failed_count,voided_count,commission_bps,commission,refunded_count,refunded_amount\n"+
		"2026-12-01,sim1,RUB,2,3001,1,0,0,150,46,2,1000\n"+
		"2026-12-01,sim1,USD,1,500,0,0,0,0,0,0,0\n"+
		"2026-12-01,sim2,RUB,0,0,0,1,1,0,0,0,0\n"+
		"2026-12-01,sim3,EUR,0,0,0,0,0,0,0,1,3000\n", buf.String())

	empty, err := reports.Build(context.Background(), pool, day.AddDate(0, 0, 5), nil)
	require.NoError(t, err)
	require.Empty(t, empty.Rows)
}

// BenchmarkDailyReport builds the report of a day of many charges (default
// 100,000; REBILL_REPORT_BENCH_CHARGES sets it) beside a tenth as many on the
// day before, generated in the test's own database with generate_series.
func BenchmarkDailyReport(b *testing.B) {
	n := 100_000
	if v := os.Getenv("REBILL_REPORT_BENCH_CHARGES"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	ctx := context.Background()
	pool := dbtest.Pool(b)
	sub := opstest.Subscription(b, pool, "sim1", day.AddDate(-1, 0, 0))
	start := time.Now()
	_, err := pool.Exec(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount, currency,
			gateway, pm_token, status, attempt_count, next_attempt_at, created_at, updated_at, attempt_due_at, attempt_times)
		SELECT gen_random_uuid(), $1, 'cust-bench', 'p' || i, $2, 100 + i % 100000, (ARRAY['RUB', 'USD'])[1 + i % 2],
			'sim' || (1 + i % 5), 'tok_ok', s.status, 1,
			CASE WHEN s.status = 'declined' THEN $2 + interval '2 days' END,
			at, at, at, ARRAY[at]
		FROM generate_series(1, $3::int) AS i,
			LATERAL (SELECT $2::timestamptz + (i % 86400) * interval '1 second' - CASE WHEN i > $4 THEN interval '1 day' ELSE interval '0' END AS at) t,
			LATERAL (SELECT CASE WHEN i % 20 = 0 THEN 'declined' WHEN i % 50 = 1 THEN 'failed' WHEN i % 97 = 2 THEN 'voided'
				ELSE 'succeeded' END AS status) s`,
		sub, day, n+n/10, n)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `ANALYZE charges`)
	require.NoError(b, err)
	b.Logf("generated %d charges (%d on the day) in %s", n+n/10, n, time.Since(start).Round(time.Millisecond))
	b.ResetTimer()
	for b.Loop() {
		rep, err := reports.Build(ctx, pool, day, reports.NoCommission)
		require.NoError(b, err)
		var total int64
		for _, r := range rep.Rows {
			total += r.CapturedCount + r.DeclinedCount + r.FailedCount + r.VoidedCount
		}
		require.EqualValues(b, n, total)
	}
}
