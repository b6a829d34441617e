package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/books"
)

// gatewayTimes are the times the simulated gateway gw stamped on the
// operations under chargeKey: at (its clock) and received_at (real time).
func (b testBundle) gatewayTimes(t *testing.T, gw, chargeKey string) (at, received []time.Time) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+"/v1/dev/gateways/"+gw+"/ledger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Data []struct {
			IdempotencyKey string    `json:"idempotency_key"`
			At             time.Time `json:"at"`
			ReceivedAt     time.Time `json:"received_at"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	for _, e := range out.Data {
		if strings.HasPrefix(e.IdempotencyKey, chargeKey+":") {
			at, received = append(at, e.At), append(received, e.ReceivedAt)
		}
	}
	return at, received
}

// In dev mode the simulated gateways and registry keep their books on the
// dev clock, as the service does: after the clock is moved months ahead, a
// charge's operations and a fine's posting are filed under the dev day,
// the reconciliation of that day finds and matches them, and `rebill
// audit` counts the captures. Real time stays in received_at.
func TestSimulatorsKeepTheirBooksOnTheDevClock(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t) // 2027-03-01 09:00 UTC, far from the wall clock's day
	require.Equal(t, start, b.clockNow(t))
	beforeAll := time.Now()

	sub := b.createSubscription(t, "tok_ok", "month")
	key := b.waitCharges(t, sub, 1, "succeeded")[0]["key"].(string)
	enr := b.createFinesEnrollment(t, "tok_ok", 500000)
	id := uin(31)
	b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", fine(id, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, enr, id, "paid")

	for _, chargeKey := range []string{key, enr + ":" + id} {
		at, received := b.gatewayTimes(t, "sim1", chargeKey)
		require.Len(t, at, 2, "authorize and capture of %s", chargeKey)
		for i := range at {
			require.True(t, at[i].Equal(start), "%s stamped %s, the dev clock is %s", chargeKey, at[i], start)
			require.False(t, received[i].Before(beforeAll.Add(-time.Second)), "received_at is real time: %s", received[i])
		}
	}
	posted := b.registryLedger(t, id)
	require.Len(t, posted, 1)
	require.True(t, posted[0].At.Equal(start), "posting stamped %s, the dev clock is %s", posted[0].At, start)

	day := books.Day(start)
	res, err := b.nodes[0].svc.Reconciler.RunDay(context.Background(), "sim1", day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status, "%+v", res.Discrepancies)
	require.Equal(t, 4, res.Operations, "two authorizes and two captures on the dev day")

	out, err := auditInProcess(t, b.pool)
	require.NoError(t, err, out)
	requireAuditCount(t, out, "gateway_captures", 2)
	requireAuditCount(t, out, "bills", 1)
}
