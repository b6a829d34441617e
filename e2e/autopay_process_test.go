package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
)

// A node killed (SIGKILL) while it charges a few hundred bills (housing
// bills and fines) leaves, once another node finished, exactly one charge
// per bill, on the gateway's books exactly one authorization and one
// capture per charge, and in the registry one posting per fine.
func TestCrashMidChargingPaysEachBillOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the rebill binary twice and kills one")
	}
	t.Parallel()
	const (
		enrolled    = 30
		billsEach   = 10
		bills       = enrolled * billsEach
		pushers     = 12
		key         = "proc-bills-admin-key-0123456789abcdef"
		capturesSQL = `SELECT count(*) FROM gatewaysim.operations WHERE gateway = 'sim1' AND op = 'capture' AND status = 'succeeded'`
	)
	dbURL := dbtest.URL(t)
	db, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	env := map[string]string{
		"DATABASE_URL": dbURL, "REBILL_DEV": "1", "REBILL_ADMIN_KEY": key, "REBILL_GATEWAY_TIMEOUT": "500ms",
		"REBILL_RETRY_BASE": "100ms", "REBILL_RETRY_MAX": "1s", "REBILL_SCAN_INTERVAL": "500ms", "REBILL_RESCUE_AFTER": "12s",
		"REBILL_LOG_LEVEL": "warn", "REBILL_DB_MAX_CONNS": "10",
		// Both nodes open the payment tokens: one key (dev mode would
		// give each data folder its own).
		"REBILL_ENCRYPTION_KEY": testEncryptionKey,
	}
	ctx := context.Background()
	count := func(query string) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(ctx, query).Scan(&n), query)
		return n
	}

	a := procStart(t, "node A", env)
	a.waitReady(t, 60*time.Second)
	now, err := time.Parse(time.RFC3339Nano, a.call(t, http.MethodGet, "/v1/dev/clock", key, nil, http.StatusOK)["now"].(string))
	require.NoError(t, err)
	// Pay on a day of the month two to three days ahead (Moscow), due a
	// month later: every bill waits for its pay day.
	moscow, err := time.LoadLocation("Europe/Moscow")
	require.NoError(t, err)
	payDay := now.In(moscow).AddDate(0, 0, 2).Day()
	if payDay > 28 {
		payDay = 1
	}
	due := now.In(moscow).AddDate(0, 1, 10).Format(time.DateOnly)

	type push struct{ enrollment, bill string }
	work := make(chan push)
	errs := make(chan error, bills)
	var wg sync.WaitGroup
	for w := 0; w < pushers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				status, data, err := a.request(http.MethodPost, "/v1/enrollments/"+p.enrollment+"/bills", key, map[string]any{
					"bill_id": p.bill, "amount": 10000, "issued_at": now.Format(time.RFC3339), "due_date": due})
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("status %d: %s", status, data)
				}
				if err != nil {
					errs <- fmt.Errorf("push %s: %w", p.bill, err)
				}
			}
		}()
	}
	// Even enrollments pay housing bills on their pay day; odd ones pay
	// fines, kept pending (paused) until they are resumed together with the
	// clock move, so that both are charged while A is killed.
	var fineEnrollments []string
	for e := 0; e < enrolled; e++ {
		body := map[string]any{
			"customer_id": fmt.Sprintf("cust-bills-%02d", e), "kind": "housing", "account_ref": fmt.Sprintf("75ДА%06d", e),
			"currency": "RUB", "max_amount": 1000000, "pay_day": payDay,
			"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
		}
		if e%2 == 1 {
			delete(body, "pay_day")
			body["kind"], body["account_ref"] = "fines", map[string]any{"sts": fmt.Sprintf("77УА%06d", e)}
		}
		enr := a.call(t, http.MethodPost, "/v1/enrollments", key, body, http.StatusCreated)["id"].(string)
		if e%2 == 1 {
			a.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/pause", key, nil, http.StatusOK)
			fineEnrollments = append(fineEnrollments, enr)
		}
		for i := 0; i < billsEach; i++ {
			id := fmt.Sprintf("B-%02d-%02d", e, i)
			if e%2 == 1 {
				id = uin(1000 + e*billsEach + i)
			}
			work <- push{enr, id}
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, bills, count(`SELECT count(*) FROM bills`))
	require.Zero(t, count(`SELECT count(*) FROM charges`), "nothing is due before the pay day")

	a.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", key, map[string]any{"latency_ms": 50}, http.StatusOK)
	for _, enr := range fineEnrollments {
		a.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/resume", key, nil, http.StatusOK)
	}
	a.call(t, http.MethodPost, "/v1/dev/clock", key, map[string]any{"advance": "96h"}, http.StatusOK)
	var seen int
	require.Eventually(t, func() bool {
		seen = count(capturesSQL)
		return seen >= bills/5
	}, 60*time.Second, 2*time.Millisecond, "captures before the kill: %d", func() any { return seen })
	a.kill(t)
	capturedByA := count(capturesSQL)
	t.Logf("killed A with %d captures in the ledger", capturedByA)
	require.Less(t, capturedByA, bills, "A finished before the kill: no crash mid-way")

	b := procStart(t, "node B", env)
	b.waitReady(t, 60*time.Second)
	require.True(t, procEventually(t, 120*time.Second, func() bool {
		return count(`SELECT count(*) FROM bills WHERE status = 'paid'`) == bills
	}), "bills paid: %d of %d; the others: %s", count(`SELECT count(*) FROM bills WHERE status = 'paid'`), bills,
		func() string {
			var out string
			_ = db.QueryRow(ctx, `SELECT coalesce(string_agg(b.bill_id || ' ' || b.status || ' charge ' || coalesce(c.status, '-') ||
					' ' || coalesce(c.failure_code, '') || ' a' || coalesce(c.attempt_count::text, '-') || ' ' || coalesce(c.review_reason, ''), '; '), '')
				FROM bills b LEFT JOIN charges c ON c.id = b.charge_id WHERE b.status <> 'paid'`).Scan(&out)
			return out
		}())

	require.Equal(t, bills, count(`SELECT count(*) FROM charges`), "one charge per bill")
	require.Equal(t, bills, count(`SELECT count(*) FROM charges WHERE status = 'succeeded'`))
	rows, err := db.Query(ctx, `SELECT c.enrollment_id::text || ':' || c.period_key,
			count(*) FILTER (WHERE o.op = 'authorize' AND o.status = 'succeeded'),
			count(*) FILTER (WHERE o.op = 'capture' AND o.status = 'succeeded'), count(*)
		FROM charges c LEFT JOIN gatewaysim.operations o ON o.charge_key = c.enrollment_id::text || ':' || c.period_key
		GROUP BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	checked := 0
	for rows.Next() {
		var chargeKey string
		var authorized, captured, ops int
		require.NoError(t, rows.Scan(&chargeKey, &authorized, &captured, &ops))
		require.Equal(t, [3]int{1, 1, 2}, [3]int{authorized, captured, ops}, "ledger of %s", chargeKey)
		checked++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, bills, checked)
	require.Equal(t, bills, count(capturesSQL), "captures in the ledger")
	// Each fine posted to the registry exactly once, before its capture.
	fines := enrolled / 2 * billsEach
	if accepted := count(`SELECT count(*) FROM dev_registry_ledger WHERE status = 'accepted'`); accepted != fines {
		// Say which fines, and what their charges and postings went through.
		rows, err := db.Query(ctx, `SELECT c.registry_uin, c.status, c.attempt_count, c.void_requested,
				coalesce((SELECT string_agg(p.payment_id || ' ' || p.status || ' a' || p.attempt, '; ') FROM registry_postings p WHERE p.charge_id = c.id), 'no posting'),
				coalesce((SELECT string_agg(r.gateway || ' ' || r.status, '; ') FROM dev_registry_ledger r WHERE r.uin = c.registry_uin), 'not in the registry')
			FROM charges c WHERE c.registry_uin IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM dev_registry_ledger r WHERE r.uin = c.registry_uin AND r.status = 'accepted')`)
		require.NoError(t, err)
		for rows.Next() {
			var uin, status, postings, ledger string
			var attempt int
			var void bool
			require.NoError(t, rows.Scan(&uin, &status, &attempt, &void, &postings, &ledger))
			t.Logf("fine %s: charge %s a%d void_requested=%v; postings: %s; registry: %s", uin, status, attempt, void, postings, ledger)
		}
		rows.Close()
		t.Fatalf("%d of %d fines accepted by the registry", accepted, fines)
	}
	require.Equal(t, fines, count(`SELECT count(DISTINCT uin) FROM dev_registry_ledger`))
	require.Zero(t, count(`SELECT count(*) FROM dev_registry_ledger r JOIN gatewaysim.operations o
		ON o.charge_key LIKE '%:' || r.uin AND o.op = 'capture' WHERE o.at < r.at`), "no capture before its posting")
	b.terminate(t, 30*time.Second)
}
