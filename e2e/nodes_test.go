package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Three nodes on one database scan the same due periods at the same time,
// over and over, while their River clients also run the periodic scan:
// every period gets one charge, and the gateway sees one authorize and one
// capture per charge.
func TestThreeNodesScanConcurrentlyChargeOncePerPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, nil)
	ctx := context.Background()
	anchor := b.clockNow(t).Add(time.Hour).Format(time.RFC3339)
	const n = 150
	subs := make([]string, n)
	for i := range subs {
		body := subscriptionBody("tok_ok_nodes", "day")
		body["customer_id"] = fmt.Sprintf("cust-%d", i)
		body["billing_anchor"] = anchor
		subs[i] = b.call(t, http.MethodPost, "/v1/subscriptions", body)["id"].(string)
	}
	// Move the clock without the API, so that only our racing scans see it.
	_, err := b.pool.Exec(ctx, `UPDATE dev_clock SET now = now + interval '49 hours'`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 3*4)
	for _, nd := range b.nodes {
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := nd.svc.Renewals.Scan(ctx, nd.svc.Clock.Now())
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	var charges, distinct int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (subscription_id, period_key)) FROM charges`).Scan(&charges, &distinct))
	require.Equal(t, 3*n, charges, "periods at +1h, +25h and +49h of each subscription")
	require.Equal(t, charges, distinct)

	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE status <> 'succeeded'`).Scan(&open))
		return open == 0
	}, 60*time.Second, 100*time.Millisecond)

	var ops, distinctOps, captures int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT idempotency_key),
		count(*) FILTER (WHERE op = 'capture' AND status = 'succeeded') FROM gatewaysim.operations`).Scan(&ops, &distinctOps, &captures))
	require.Equal(t, 2*charges, ops, "one authorize and one capture per charge")
	require.Equal(t, ops, distinctOps)
	require.Equal(t, charges, captures)

	out, err := auditInProcess(t, b.pool)
	require.NoError(t, err, out)
	requireAuditCount(t, out, "captured", charges)
	requireAuditCount(t, out, "gateway_captures", charges)
}

// The durable dead-letter backstop: a charge whose job River discarded
// without any worker seeing it (a node crashed on the last attempt and the
// rescuer gave up) reaches the review queue on the next scan.
func TestDiscardedJobSendsChargeToReview(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := context.Background()
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"down": true})
	sub := b.createSubscription(t, "tok_ok_discard", "month")
	cs := b.waitCharges(t, sub, 1, "authorizing")
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now()
		WHERE kind = 'charge_authorize' AND args ->> 'charge_id' = $1`, cs[0]["id"])
	require.NoError(t, err)
	b.advance(t, "1m")
	b.waitCharges(t, sub, 1, "requires_review")
	queue := b.call(t, http.MethodGet, "/v1/review-queue", nil)["data"].([]any)
	require.Len(t, queue, 1)

	// While it is unresolved no second charge for the period can exist.
	status, _ := b.callStatus(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{})
	require.Equal(t, http.StatusOK, status)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n))
	require.Equal(t, 1, n)
}

// A cancel that arrives while the hold is being placed releases the hold
// instead of capturing it.
func TestCancelDuringAuthorizeVoidsTheHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_GATEWAY_TIMEOUT": "3s", "REBILL_RESCUE_AFTER": "20s"})
	b.call(t, http.MethodPost, "/v1/dev/gateways/sim1/faults", map[string]any{"latency_ms": 800})
	sub := b.createSubscription(t, "tok_ok_void", "month")
	b.waitCharges(t, sub, 1, "authorizing")
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{})
	cs := b.waitCharges(t, sub, 1, "voided")
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "void:succeeded": 1}, opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string)))
}
