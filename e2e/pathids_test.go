package e2e_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bill id with a slash (an issuer's INV/2026/12) is confirmed and
// withdrawn through its percent-encoded path; "." and "..", which proxies
// normalise away, are refused when the bill is pushed.
func TestBillIDsAreAddressablePercentEncoded(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	enr := b.createHousingEnrollment(t, "76ДИ234567", 5, 1000)
	push := func(id string) (int, map[string]any) {
		return b.callStatus(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", map[string]any{
			"bill_id": id, "amount": 5000, "issued_at": start.Format(time.RFC3339), "due_date": "2027-04-15"})
	}
	for _, id := range []string{"INV/2026/12", "INV/2026/13"} {
		status, bill := push(id)
		require.Equal(t, http.StatusCreated, status, "%v", bill)
		require.Equal(t, "awaiting_confirmation", bill["status"])
	}
	confirmed := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+url.PathEscape("INV/2026/12")+"/confirm", nil)
	require.Equal(t, "INV/2026/12", confirmed["bill_id"])
	require.NotEqual(t, "awaiting_confirmation", confirmed["status"])
	withdrawn := b.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/INV%2f2026%2F13/withdraw", nil)
	require.Equal(t, "INV/2026/13", withdrawn["bill_id"])
	require.Equal(t, "withdrawn", withdrawn["status"])

	for _, id := range []string{".", ".."} {
		status, problem := push(id)
		require.Equal(t, http.StatusBadRequest, status, "%q: %v", id, problem)
		require.Equal(t, []string{"bill_id"}, fieldsOf(problem))
	}
	require.Len(t, b.bills(t, enr), 2)
}
