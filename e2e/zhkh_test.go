package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/zhkh"
	"github.com/rebill/rebill/zhkh/party"
	zhkhsim "github.com/rebill/rebill/zhkh/party/sim"
)

// zhkhLedger is the simulated GIS ZhKH party's ledger entry of the report
// of a bill's payment, if it holds one.
func (b testBundle) zhkhLedger(t *testing.T, enrollment, billID string) []zhkhsim.LedgerEntry {
	t.Helper()
	ledger, err := zhkhsim.Sim{Pool: b.pool}.Ledger(context.Background())
	require.NoError(t, err)
	id := party.ReportID(enrollment + ":" + billID)
	var out []zhkhsim.LedgerEntry
	for _, e := range ledger {
		if e.ReportID == id {
			out = append(out, e)
		}
	}
	return out
}

// waitReport waits until the charge's report is in status.
func (b testBundle) waitReport(t *testing.T, chargeID string, status zhkh.Status) zhkh.Report {
	t.Helper()
	var r zhkh.Report
	require.Eventually(t, func() bool {
		got, err := zhkh.OfCharge(context.Background(), b.pool, uuid.MustParse(chargeID))
		if err == nil {
			r = got
		}
		return err == nil && r.Status == status
	}, 20*time.Second, 50*time.Millisecond, "report of charge %s in %s (last: %+v)", chargeID, status, r)
	return r
}

// On two dev nodes, a captured housing payment is reported to the
// simulated GIS ZhKH party once, with its account and bill; refunded in
// full, its report is annulled once. A fine is reported to nobody there.
func TestHousingPaymentReportedToGISZhKHAndAnnulledOnRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	start := b.autopayStart(t)
	housing := b.createHousingEnrollment(t, "76ДЕ234599", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "Z-1", "amount": 5000, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-03-25"})
	b.scanNow(t)
	b.waitBill(t, housing, "Z-1", "paid")
	charge := b.enrollmentCharges(t, housing)[0]
	id := charge["id"].(string)
	r := b.waitReport(t, id, zhkh.Accepted)
	require.Equal(t, "76ДЕ234599", r.Capture.Account)
	ledger := b.zhkhLedger(t, housing, "Z-1")
	require.Len(t, ledger, 1, "reported once")
	require.Equal(t, "accepted", ledger[0].Status)
	require.Equal(t, "Z-1", ledger[0].BillID)
	require.EqualValues(t, 5000, ledger[0].Amount)

	b.call(t, http.MethodPost, "/v1/charges/"+id+"/refunds", map[string]any{"reason": "duplicate"})
	b.waitRefunds(t, id, 1, "succeeded")
	b.waitReport(t, id, zhkh.Cancelled)
	ledger = b.zhkhLedger(t, housing, "Z-1")
	require.Len(t, ledger, 1)
	require.Equal(t, "cancelled", ledger[0].Status)

	fines := b.createFinesEnrollment(t, "tok_ok", 500000)
	fineID := uin(4242)
	b.call(t, http.MethodPost, "/v1/enrollments/"+fines+"/bills", fine(fineID, 100000, 50000, start, "2027-03-20", "2027-05-09"))
	b.waitBill(t, fines, fineID, "paid")
	fineCharge := b.enrollmentCharges(t, fines)[0]["id"].(string)
	require.Empty(t, b.zhkhLedger(t, fines, fineID), "a fine goes to GIS GMP")
	_, err := zhkh.OfCharge(context.Background(), b.pool, uuid.MustParse(fineCharge))
	require.ErrorIs(t, err, zhkh.ErrNotFound)
}

// GIS ZhKH refuses a housing payment's information: the bill stays paid,
// the charge captured, and the report waits in staff's review list with
// the reason until a person marks it reviewed.
func TestRefusedReportWaitsForAPersonWithTheMoneyCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.autopayStart(t)
	reason := "ipd_unknown: payment document not found"
	_, err := zhkhsim.Sim{Pool: b.pool}.SetFaults(context.Background(), "zhkh1", zhkhsim.FaultsPatch{Refuse: &reason})
	require.NoError(t, err)
	housing := b.createHousingEnrollment(t, "76ДЕ234599", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "Z-2", "amount": 7000, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-03-25"})
	b.scanNow(t)
	b.waitBill(t, housing, "Z-2", "paid")
	charge := b.enrollmentCharges(t, housing)[0]
	id := charge["id"].(string)
	b.waitReport(t, id, zhkh.Refused)

	report := b.call(t, http.MethodGet, "/v1/charges/"+id+"/zhkh-report", nil)
	require.Equal(t, "refused", report["status"])
	require.Contains(t, report["review_reason"], "payment document not found")
	require.Equal(t, "succeeded", b.call(t, http.MethodGet, "/v1/charges/"+id, nil)["status"], "the money stays captured")
	review := b.call(t, http.MethodGet, "/v1/zhkh-review", nil)["data"].([]any)
	require.Len(t, review, 1)
	require.Equal(t, id, review[0].(map[string]any)["charge_id"])

	reviewed := b.call(t, http.MethodPost, "/v1/charges/"+id+"/zhkh-report/reviewed", nil)
	require.NotNil(t, reviewed["reviewed_at"])
	require.Empty(t, b.call(t, http.MethodGet, "/v1/zhkh-review", nil)["data"])
	status, _ := b.callStatus(t, http.MethodPost, "/v1/charges/"+id+"/zhkh-report/reviewed", nil)
	require.Equal(t, http.StatusNotFound, status, "nothing left to review")
}

// Dev mode's endpoints of the simulated GIS ZhKH party on a node as
// `rebill serve` builds it: a customer key may neither read the ledger nor
// switch faults; with the party down (switched through the API) a captured
// housing payment's report waits, and the ledger holds nothing of it; once
// the party is back the API's ledger shows the one report, named by its
// charge, with the payment document's identifiers and the supplier.
func TestDevZhkhLedgerAndFaultsOverTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.autopayStart(t)
	customer := b.newKey(t, "customer", "cust-auto")
	status, _ := b.callAs(t, customer, http.MethodGet, "/v1/dev/zhkh/ledger", nil)
	require.Equal(t, http.StatusForbidden, status)
	status, _ = b.callAs(t, customer, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", map[string]any{"down": true})
	require.Equal(t, http.StatusForbidden, status)
	status, out := b.callStatus(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", map[string]any{"error_rate": 2})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, fmt.Sprint(out), "error_rate")

	b.call(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", map[string]any{"down": true})
	housing := b.createHousingEnrollment(t, "76ДЕ234577", 0, 1000000)
	b.call(t, http.MethodPost, "/v1/enrollments/"+housing+"/bills", map[string]any{
		"bill_id": "Z-7", "amount": 7300, "issued_at": b.clockNow(t).Format(time.RFC3339), "due_date": "2027-03-25",
		"payment_document_id": "76ДЕ234577-01-6011", "service_id": "76ДЕ234577-01", "period": "2027-02",
		"supplier_inn": "7707083893"})
	b.scanNow(t)
	b.waitBill(t, housing, "Z-7", "paid")
	id := b.enrollmentCharges(t, housing)[0]["id"].(string)
	require.Eventually(t, func() bool {
		r, err := zhkh.OfCharge(context.Background(), b.pool, uuid.MustParse(id))
		return err == nil && r.Status == zhkh.Pending && strings.Contains(r.LastError, "down")
	}, 20*time.Second, 50*time.Millisecond, "the report waits for the party")
	require.Empty(t, b.zhkhLedger(t, housing, "Z-7"), "a party that is down holds nothing")

	b.call(t, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", map[string]any{"down": false})
	b.waitReport(t, id, zhkh.Accepted)
	var mine []map[string]any
	for _, e := range b.call(t, http.MethodGet, "/v1/dev/zhkh/ledger", nil)["data"].([]any) {
		if e := e.(map[string]any); e["charge_id"] == id {
			mine = append(mine, e)
		}
	}
	require.Len(t, mine, 1, "reported once")
	e := mine[0]
	require.Equal(t, party.ReportID(housing+":Z-7"), e["report_id"])
	require.Equal(t, "accepted", e["status"])
	require.Equal(t, "76ДЕ234577-01-6011", e["payment_document_id"])
	require.Equal(t, "76ДЕ234577-01", e["service_id"])
	require.Equal(t, "2027-02", e["period"])
	require.Equal(t, "7707083893", e["supplier_inn"])
	require.EqualValues(t, 7300, e["amount"])
}
