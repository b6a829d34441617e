package e2e_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
)

// stuckAuthorizing leaves the subscription's first charge authorizing with
// no job: its gateway is down, so the authorize job snoozes, and then the
// job is deleted (by a person in River UI, or lost). It returns the
// charge's id and key.
func (b testBundle) stuckAuthorizing(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	b.faults(t, map[string]any{"down": true})
	sub := b.createSubscription(t, "tok_ok", "month")
	c := b.waitCharges(t, sub, 1, "authorizing")[0]
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'charge_authorize'
			AND state = 'scheduled' AND args->>'charge_id' = $1`, c["id"]).Scan(&n))
		return n == 1
	}, 30*time.Second, 20*time.Millisecond, "the authorize job waits for the gateway")
	_, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind LIKE 'charge_%'`)
	require.NoError(t, err)
	b.faults(t, map[string]any{"down": false})
	return c["id"].(string), c["key"].(string)
}

func TestInspectorKicksAChargeWhoseJobWasDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	insp := b.nodes[0].svc.Inspector
	id, key := b.stuckAuthorizing(t)

	// Not yet: it has not stood still for twice the gateway timeout plus
	// the rescue time.
	sum, err := insp.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, sum.Kicked+sum.Review)

	b.advance(t, "1h")
	// Two inspections at once (two leaders in a split brain, or a slow
	// run) enqueue the job once.
	sums := make(chan int, 2)
	for range 2 {
		go func() {
			s, err := insp.Run(ctx)
			if err != nil {
				t.Error(err)
			}
			t.Logf("inspection: %+v", s)
			sums <- s.Kicked + s.Review
		}()
	}
	require.Equal(t, 1, <-sums+<-sums, "one kick between the two")

	var c map[string]any
	require.Eventually(t, func() bool {
		c = b.call(t, http.MethodGet, "/v1/charges/"+id, nil)
		return c["status"] == "succeeded"
	}, 30*time.Second, 50*time.Millisecond, "charge: %v", func() any { return c })
	require.EqualValues(t, 1, c["attempt_count"])
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(b.ledger(t, "sim1"), key))

	// Paid: nothing is stuck any more, and a later inspection does nothing.
	sum, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, sum.Kicked+sum.Review+sum.Reported)
	var charges int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&charges))
	require.Equal(t, 1, charges)
}

func TestInspectorSendsAnOverdueUnknownToReview(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	insp := b.nodes[0].svc.Inspector
	id, key := b.stuckAuthorizing(t)
	// Its outcome became unknown and the reconcile job was lost.
	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = 'unknown', unknown_phase = 'authorize' WHERE id = $1`, id)
	require.NoError(t, err)

	b.advance(t, "30m")
	sum, err := insp.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, sum.Review, "not an hour overdue yet")

	b.advance(t, "31m")
	sum, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sum.Review)
	c := b.call(t, http.MethodGet, "/v1/charges/"+id, nil)
	require.Equal(t, "requires_review", c["status"])
	require.Equal(t, "unknown_overdue", c["review_code"])
	require.Equal(t, charges.ReviewUnknownOverdue.Sentence(), c["review_reason"])
	queue := b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"].([]any)
	require.Len(t, queue, 1)
	require.Equal(t, id, queue[0].(map[string]any)["id"])

	// Nothing was sent to the gateway in its place, then or later.
	sum, err = insp.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, sum.Kicked+sum.Review)
	b.waitChargeJobsFinal(t, id)
	require.Empty(t, opsFor(b.ledger(t, "sim1"), key))
	var charges int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&charges))
	require.Equal(t, 1, charges)
}

func (b testBundle) getRaw(t *testing.T, path, key, accept string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header.Get("Content-Type"), string(body)
}

func TestReconciliationAndDailyReportEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	var keys []string
	for range 2 {
		sub := b.createSubscription(t, "tok_ok", "month")
		keys = append(keys, b.waitCharges(t, sub, 1, "succeeded")[0]["key"].(string))
	}
	day := books.Day(b.clockNow(t))
	date := day.Format(time.DateOnly)
	path := "/v1/reconciliation?gateway=sim1&date=" + date

	pending := b.call(t, http.MethodGet, path, nil)
	require.Equal(t, "pending", pending["status"])
	require.Nil(t, pending["checked_at"])

	// A second capture of the first charge, under another attempt's key,
	// is slipped into the gateway's books on the dev day.
	opstest.InsertOp(t, b.pool, opstest.Op{Gateway: "sim1", ChargeKey: keys[0], Attempt: 2, Op: "capture", Amount: 1500,
		Currency: "USD", At: b.clockNow(t)})
	_, err := b.nodes[0].svc.Reconciler.RunDay(ctx, "sim1", day)
	require.NoError(t, err)
	got := b.call(t, http.MethodGet, path, nil)
	require.Equal(t, "discrepancies", got["status"])
	require.EqualValues(t, 5, got["operations"])
	ds := got["discrepancies"].([]any)
	require.Len(t, ds, 1)
	require.Equal(t, "duplicate_capture", ds[0].(map[string]any)["kind"])

	// A clean gateway day.
	_, err = b.nodes[0].svc.Reconciler.RunDay(ctx, "sim2", day)
	require.NoError(t, err)
	require.Equal(t, "matched", b.call(t, http.MethodGet, "/v1/reconciliation?gateway=sim2&date="+date, nil)["status"])

	report := b.call(t, http.MethodGet, "/v1/reports/daily?date="+date, nil)
	require.Equal(t, date, report["date"])
	rows := report["data"].([]any)
	require.Len(t, rows, 1)
	row := rows[0].(map[string]any)
	require.Equal(t, "sim1", row["gateway"])
	require.Equal(t, "USD", row["currency"])
	require.EqualValues(t, 2, row["captured_count"])
	require.EqualValues(t, 3000, row["captured_amount"])

	status, ctype, body := b.getRaw(t, "/v1/reports/daily?date="+date, adminKey, "text/csv")
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(ctype, "text/csv"), ctype)
	require.Equal(t, "date,gateway,currency,captured_count,captured_amount,declined_count,failed_count,voided_count,commission_bps,commission,refunded_count,refunded_amount\n"+
		date+",sim1,USD,2,3000,0,0,0,150,45,0,0\n", body) // sim1 takes 150 bps: 45 of 3000
	status, _, csvBody := b.getRaw(t, "/v1/reports/daily?format=csv&date="+date, adminKey, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, body, csvBody)

	for _, bad := range []string{"/v1/reconciliation?gateway=sim1", "/v1/reconciliation?gateway=nope&date=" + date,
		"/v1/reconciliation?date=" + date, "/v1/reports/daily?date=2026-13-01", "/v1/reports/daily?date=" + date + "&format=xml"} {
		status, out := b.callStatus(t, http.MethodGet, bad, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", bad, out)
	}
	customer := b.call(t, http.MethodPost, "/v1/api-keys", map[string]any{"role": "customer", "customer_id": "cust-e2e"})["key"].(string)
	for _, p := range []string{path, "/v1/reports/daily?date=" + date} {
		status, _, _ := b.getRaw(t, p, customer, "")
		require.Equal(t, http.StatusForbidden, status, p)
	}
}

// With REBILL_REPLICA_URL the operators' reads go to the replica: here a
// second database whose books say something the primary's do not.
func TestOperatorReadsGoToTheReplica(t *testing.T) {
	t.Parallel()
	replica := dbtest.Pool(t)
	_, err := replica.Exec(context.Background(), `INSERT INTO reconciliation_days (gateway, day, status, operations, checked_at)
		VALUES ('sim1', '2026-11-30', 'matched', 42, now())`)
	require.NoError(t, err)
	replicaURL, err := url.Parse(replica.Config().ConnString())
	require.NoError(t, err)
	q := replicaURL.Query()
	q.Set("pool_max_conns", "1") // the suite shares the server
	replicaURL.RawQuery = q.Encode()
	b := setup(t, 1, map[string]string{"REBILL_REPLICA_URL": replicaURL.String()})
	got := b.call(t, http.MethodGet, "/v1/reconciliation?gateway=sim1&date=2026-11-30", nil)
	require.Equal(t, "matched", got["status"])
	require.EqualValues(t, 42, got["operations"])

	var onPrimary int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_days`).Scan(&onPrimary))
	require.Zero(t, onPrimary)
}

// In dev mode, moving the clock past a day's end plus the settling hour
// has that day reconciled at once, as the billing scan is run at once:
// the hourly catch-up tick runs on real time, which the move does not
// advance.
func TestDevClockMoveReconcilesTheDayPromptly(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	now := b.clockNow(t)
	date := books.Day(now).Format(time.DateOnly)
	path := "/v1/reconciliation?gateway=sim1&date=" + date
	require.Equal(t, "pending", b.call(t, http.MethodGet, path, nil)["status"])
	// The leader's tick at start has run: the next one is an hour away.
	require.Eventually(t, func() bool {
		var ticks int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'reconcile_tick' AND state = 'completed'`).Scan(&ticks))
		return ticks > 0
	}, 20*time.Second, 50*time.Millisecond)

	b.advance(t, books.Day(now).Add(24*time.Hour+books.Settle+time.Minute).Sub(now).String())
	var got map[string]any
	require.Eventually(t, func() bool {
		got = b.call(t, http.MethodGet, path, nil)
		return got["status"] != "pending"
	}, 20*time.Second, 50*time.Millisecond, "the day is reconciled within seconds of the move")
	require.Equal(t, "matched", got["status"], "%v", got)
	require.EqualValues(t, 2, got["operations"], "the charge's authorize and capture")
}
