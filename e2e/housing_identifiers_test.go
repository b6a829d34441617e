package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// housingBill is a housing bill issued at issued, with its GIS ZhKH
// identifiers.
func housingBill(id string, issued time.Time) map[string]any {
	return map[string]any{"bill_id": id, "amount": 250000, "issued_at": issued.Format(time.RFC3339), "due_date": "2027-03-25",
		"payment_document_id": "75да533315-01-6011", "service_id": "75ДА533315-01", "period": "2027-02",
		"supplier_inn": "7743013901", "supplier_kpp": "773601001", "supplier_name": "УК Дом"}
}

// A pushed housing bill with an identifier that does not fit is 400
// naming the field and saying why, and nothing is stored; one that fits
// is stored and echoed with its identifiers, the ИПД in its canonical
// spelling.
func TestHousingBillIdentifiersOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.enrol(t, "cust-ids", "housing", "75ДА533315", "tok_ok")
	for field, bad := range map[string]any{
		"payment_document_id": "75ДА533315-01",
		"service_id":          "77АБ000001-01",
		"period":              "2027-2",
		"supplier_inn":        "7743013902",
		"supplier_kpp":        "7736-0100",
	} {
		body := housingBill("H-"+field, start.Add(-time.Hour))
		body[field] = bad
		status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", field, out)
		require.Contains(t, fmt.Sprint(out["errors"]), field, "%v", out)
		require.Contains(t, fmt.Sprint(out["errors"]), "must", "the problem says why: %v", out)
	}
	require.Empty(t, b.bills(t, enr), "nothing stored")

	status, out := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", housingBill("H-1", start.Add(-time.Hour)))
	require.Equal(t, http.StatusCreated, status, "%v", out)
	require.Equal(t, "75ДА533315-01-6011", out["payment_document_id"])
	require.Equal(t, "75ДА533315-01", out["service_id"])
	require.Equal(t, "2027-02", out["period"])
	require.Equal(t, "7743013901", out["supplier_inn"])
	require.Equal(t, "773601001", out["supplier_kpp"])
	require.Equal(t, "УК Дом", out["supplier_name"])
	plain := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", map[string]any{"bill_id": "H-2", "amount": 1000,
		"issued_at": start.Add(-time.Hour).Format(time.RFC3339), "due_date": "2027-03-25"})
	require.Nil(t, plain["payment_document_id"], "a bill without identifiers is paid as before")
	require.Contains(t, plain, "payment_document_id")
}

// Two customers enrol one account; the first's copy of a payment document
// is declined for good, the second's copy of the same document comes
// under another bill id. The first charge lets go of both identities,
// the second copy is paid, once, and the declined copy stays a duplicate.
func TestPaymentDocumentReleasedToACopyUnderAnotherBillID(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	ann := b.enrol(t, "cust-ann", "housing", "75ДА533315", "tok_decline_hard")
	b.call(t, http.MethodPost, "/v1/enrollments/"+ann+"/bills", housingBill("H-ann", start.Add(-time.Hour)))
	require.Eventually(t, func() bool {
		cs := b.enrollmentCharges(t, ann)
		return len(cs) == 1 && cs[0]["status"] == "failed"
	}, 30*time.Second, 50*time.Millisecond)

	bob := b.enrol(t, "cust-bob", "housing", "75ДА533315", "tok_ok")
	pushed := b.call(t, http.MethodPost, "/v1/enrollments/"+bob+"/bills", housingBill("ЕПД-bob", start.Add(-time.Hour)))
	require.Equal(t, "duplicate", pushed["status"], "ann's charge holds the payment document")
	b.scanNow(t)
	b.waitBill(t, bob, "ЕПД-bob", "paid")
	require.Equal(t, "duplicate", b.bills(t, ann)[0]["status"], "the released copy is a duplicate for good")
	ledger := b.ledger(t, "sim1")
	require.Equal(t, 1, succeededOps(ledger, "capture", ann+":H-ann", bob+":ЕПД-bob"))

	var held int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM charges WHERE document_identity = 'ipd:75ДА533315-01-6011' AND identity_held`).Scan(&held))
	require.Equal(t, 1, held)
}
