package e2e_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// receiptOps lists, for the operations sent under chargeKey, "op:status"
// with the receipt each carried (as the simulator recorded it).
func (b testBundle) receiptOps(t *testing.T, gateway, chargeKey string) (ops []string, receipts []json.RawMessage) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url()+"/v1/dev/gateways/"+gateway+"/ledger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Data []struct {
			Op             string          `json:"op"`
			IdempotencyKey string          `json:"idempotency_key"`
			Status         string          `json:"status"`
			Receipt        json.RawMessage `json:"receipt"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	for _, e := range out.Data {
		if strings.HasPrefix(e.IdempotencyKey, chargeKey+":") {
			ops = append(ops, e.Op+":"+e.Status)
			receipts = append(receipts, e.Receipt)
		}
	}
	return ops, receipts
}

// With REBILL_BILL_RECEIPTS=housing=rebill, a housing bill's hold and
// capture carry its 54-FZ receipt with the payment agent's type and the
// supplier, sent to the enrollment's receipt_customer, and its refund
// exactly one refund receipt of the same item: the simulated gateway
// records what it was sent.
func TestHousingPaymentAndRefundCarryTheAgentsReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, map[string]string{"REBILL_BILL_RECEIPTS": "housing=rebill",
		"REBILL_BILL_RECEIPT_AGENT_TYPE":       "payment_agent",
		"REBILL_BILL_RECEIPT_SUPPLIER_HOUSING": "inn=7701234567;phone=74951234567;name=ООО УК Дом"})
	start := b.autopayStart(t)
	enr := b.call(t, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-auto", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 1000000,
		"payment_method":   map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
		"receipt_customer": map[string]any{"email": "anna@example.com"},
	})
	require.Equal(t, map[string]any{"email": "anna@example.com"}, enr["receipt_customer"])
	id := enr["id"].(string)
	_, pushed := b.callStatus(t, http.MethodPost, "/v1/enrollments/"+id+"/bills", map[string]any{"bill_id": "ZHKU-2027-02",
		"amount": 734500, "issued_at": start.Format(time.RFC3339), "due_date": "2027-03-25"})
	require.Equal(t, "paying", pushed["status"], "%v", pushed)
	b.waitBill(t, id, "ZHKU-2027-02", "paid")
	charge := b.enrollmentCharges(t, id)[0]
	b.call(t, http.MethodPost, "/v1/charges/"+charge["id"].(string)+"/refunds", map[string]any{"reason": "requested_by_customer"})
	b.waitRefunds(t, charge["id"].(string), 1, "succeeded")

	want := `{"customer":{"email":"anna@example.com"},"items":[{"description":"ЖКУ, ЕЛС 75ДА533315, счёт ZHKU-2027-02",
		"quantity":"1","amount":734500,"vat_code":1,"payment_subject":"service","payment_mode":"full_payment",
		"agent_type":"payment_agent","supplier":{"name":"ООО УК Дом","phone":"74951234567","inn":"7701234567"}}]}`
	ops, receipts := b.receiptOps(t, "sim1", id+":ZHKU-2027-02")
	require.Equal(t, []string{"authorize:succeeded", "capture:succeeded", "refund:succeeded"}, ops, "one refund")
	for i, r := range receipts {
		require.JSONEq(t, want, string(r), ops[i])
	}
}

// Without REBILL_BILL_RECEIPTS, nothing changes for a deployment: a
// housing bill of an enrollment with a receipt contact is paid with no
// receipt of rebill's (the gateway's fiscalisation, or none).
func TestBillReceiptsAreOffByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	start := b.autopayStart(t)
	id := b.call(t, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-auto", "kind": "housing", "account_ref": "75ДА533315", "currency": "RUB", "max_amount": 1000000,
		"payment_method":   map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
		"receipt_customer": map[string]any{"phone": "79001234567"},
	})["id"].(string)
	b.call(t, http.MethodPost, "/v1/enrollments/"+id+"/bills", map[string]any{"bill_id": "ZHKU-2027-02",
		"amount": 734500, "issued_at": start.Format(time.RFC3339), "due_date": "2027-03-25"})
	b.waitBill(t, id, "ZHKU-2027-02", "paid")
	ops, receipts := b.receiptOps(t, "sim1", id+":ZHKU-2027-02")
	require.Equal(t, []string{"authorize:succeeded", "capture:succeeded"}, ops)
	for _, r := range receipts {
		require.Nil(t, r)
	}
}
