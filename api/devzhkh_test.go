package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/zhkh/party"
	zhkhsim "github.com/rebill/rebill/zhkh/party/sim"
)

// simZhkh is the simulated party over the test's database, its reports
// named by no charge (these tests make none).
type simZhkh struct{ zhkhsim.Sim }

func (s simZhkh) Ledger(ctx context.Context) ([]api.ZhkhLedgerEntry, error) {
	entries, err := s.Sim.Ledger(ctx)
	out := make([]api.ZhkhLedgerEntry, len(entries))
	for i, e := range entries {
		out[i] = api.ZhkhLedgerEntry{LedgerEntry: e, ChargeID: "9b2f3c1e-0000-4000-8000-000000000001"}
	}
	return out, err
}

// devZhkhSetup is dev mode with the simulated GIS ZhKH party.
func devZhkhSetup(t *testing.T) (testBundle, zhkhsim.Sim) {
	t.Helper()
	var sim zhkhsim.Sim
	b := setup(t, setupOpts{lease: time.Minute, dev: func(t *testing.T, pool *pgxpool.Pool) *api.Dev {
		manual, err := clock.NewManual(context.Background(), pool, devStart)
		require.NoError(t, err)
		sim = zhkhsim.Sim{Pool: pool, Clock: manual}
		return &api.Dev{Clock: manual, Gateways: noGateways{}, Zhkh: simZhkh{sim}}
	}})
	return b, sim
}

// The simulated GIS ZhKH party's ledger and switches are every client's:
// a customer key is refused them; staff read the ledger with the payment
// document's identifiers and switch faults that the party then has.
func TestDevZhkhIsForStaff(t *testing.T) {
	t.Parallel()
	b, sim := devZhkhSetup(t)
	customer := b.newKey(t, "customer", "alice")
	support := b.newKey(t, "support", "")
	paid := devStart.Add(-time.Hour)
	require.NoError(t, sim.Parties()[0].Report(context.Background(), party.Payment{ReportID: "r1", Account: "75ДА533315",
		BillID: "2026-11", PaymentDocumentID: "75ДА533315-01-6111", ServiceID: "75ДА533315-01", Period: "2026-11",
		SupplierINN: "7701234567", Amount: 345000, Currency: "RUB", PaidAt: paid}))

	res := b.do(t, http.MethodGet, "/v1/dev/zhkh/ledger", customer, "", "")
	require.Equal(t, http.StatusForbidden, res.status, string(res.body))
	res = b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", customer, "cust-down", `{"down":true}`)
	require.Equal(t, http.StatusForbidden, res.status, string(res.body))
	require.Zero(t, b.count(t, "dev_zhkh_faults"), "a customer switched nothing")

	res = b.do(t, http.MethodGet, "/v1/dev/zhkh/ledger", support, "", "")
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	data := res.json(t)["data"].([]any)
	require.Len(t, data, 1)
	e := data[0].(map[string]any)
	require.Equal(t, "r1", e["report_id"])
	require.Equal(t, "75ДА533315-01-6111", e["payment_document_id"])
	require.Equal(t, "75ДА533315-01", e["service_id"])
	require.Equal(t, "2026-11", e["period"])
	require.Equal(t, "7701234567", e["supplier_inn"])
	require.Equal(t, "accepted", e["status"])
	require.Equal(t, paid.Format(time.RFC3339), e["paid_at"])
	require.NotContains(t, e, "cancelled_at")

	res = b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", adminKey, "admin-down", `{"down":true,"processing":2}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, map[string]any{"down": true, "error_rate": 0.0, "lose_response": false, "processing": 2.0, "refuse": ""}, res.json(t))
	err := sim.Parties()[0].Report(context.Background(), party.Payment{ReportID: "r2", Account: "75ДА533315", BillID: "2026-12",
		Amount: 100, Currency: "RUB", PaidAt: paid})
	require.ErrorIs(t, err, party.ErrUnavailable, "the party is down as switched")

	res = b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", support, "support-up", `{"down":false}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, 2.0, res.json(t)["processing"], "a partial update keeps the other switches")
}

// A fault body out of range, of the wrong type or with an unknown member
// is refused naming the field, and changes nothing; an unknown party is
// 404.
func TestDevZhkhFaultsRefuseBadBodies(t *testing.T) {
	t.Parallel()
	b, _ := devZhkhSetup(t)
	for i, c := range []struct{ body, field string }{
		{`{"error_rate":1.5}`, "error_rate"},
		{`{"error_rate":-0.1}`, "error_rate"},
		{`{"processing":-1}`, "processing"},
		{`{"processing":1001}`, "processing"},
		{`{"down":"yes"}`, "down"},
		{`{"refuse":"` + strings.Repeat("x", 501) + `"}`, "refuse"},
	} {
		res := b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", adminKey, "bad-"+string(rune('a'+i)), c.body)
		require.Equal(t, http.StatusBadRequest, res.status, c.body+": "+string(res.body))
		require.Contains(t, string(res.body), c.field, c.body)
	}
	res := b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", adminKey, "bad-unknown", `{"explode":true}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	require.Contains(t, string(res.body), "explode")
	require.Zero(t, b.count(t, "dev_zhkh_faults"), "nothing was switched")

	res = b.do(t, http.MethodPost, "/v1/dev/zhkh/gmp1/faults", adminKey, "unknown-party", `{"down":true}`)
	require.Equal(t, http.StatusNotFound, res.status, string(res.body))
}

// Outside dev mode there is no simulated party to read or switch: 404,
// whoever asks.
func TestDevZhkhNotInProduction(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/dev/zhkh/ledger", adminKey, "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", adminKey, "k", `{"down":true}`).status)
}
