package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// receiptBody is createBody (49900 RUB) with a receipt.
func receiptBody(receipt string) string {
	return strings.Replace(createBody, `"description":"Gym, monthly"`, `"description":"Gym, monthly","receipt":`+receipt, 1)
}

func TestSubscriptionCarriesAReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	receipt := `{"customer":{"email":"user@example.com"},"tax_system_code":1,"items":[
		{"description":"Gym","quantity":"1","amount":39900,"vat_code":1,"payment_subject":"service","payment_mode":"full_payment"},
		{"description":"Towel","quantity":"0.5","amount":20000,"vat_code":6}]}`
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "receipt-1", receiptBody(receipt))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	created := res.json(t)
	require.NotNil(t, created["receipt"])

	got := b.do(t, http.MethodGet, "/v1/subscriptions/"+created["id"].(string), adminKey, "", "")
	require.Equal(t, http.StatusOK, got.status)
	require.JSONEq(t, receipt, string(mustJSON(t, got.json(t)["receipt"])))

	plain := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "receipt-2", createBody)
	require.Equal(t, http.StatusCreated, plain.status)
	require.Contains(t, string(plain.body), `"receipt":null`)
}

func TestBadReceiptIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	item := func(quantity string, amount, vat int) string {
		return `{"description":"Gym","quantity":"` + quantity + `","amount":` + itoa(amount) + `,"vat_code":` + itoa(vat) + `}`
	}
	for _, tc := range []struct {
		name, receipt string
		fields        []string
	}{
		{"no contact", `{"customer":{},"items":[` + item("1", 49900, 1) + `]}`, []string{"receipt.customer"}},
		{"bad email and phone", `{"customer":{"email":"not an email","phone":"12"},"items":[` + item("1", 49900, 1) + `]}`,
			[]string{"receipt.customer.email", "receipt.customer.phone"}},
		{"no items", `{"customer":{"phone":"79001234567"},"items":[]}`, []string{"receipt.items"}},
		{"sum differs", `{"customer":{"phone":"79001234567"},"items":[` + item("1", 49800, 1) + `]}`, []string{"receipt.items"}},
		{"fractional sum differs", `{"customer":{"phone":"79001234567"},"items":[` + item("0.333", 149850, 1) + `]}`, []string{"receipt.items"}},
		{"vat code", `{"customer":{"phone":"79001234567"},"items":[` + item("1", 49900, 13) + `]}`, []string{"receipt.items[0].vat_code"}},
		{"quantity", `{"customer":{"phone":"79001234567"},"items":[` + item("0", 49900, 1) + `]}`, []string{"receipt.items[0].quantity"}},
		{"quantity places", `{"customer":{"phone":"79001234567"},"items":[` + item("1.0001", 49900, 1) + `]}`, []string{"receipt.items[0].quantity"}},
		{"empty description", `{"customer":{"phone":"79001234567"},"items":[{"description":"","quantity":"1","amount":49900,"vat_code":1}]}`,
			[]string{"receipt.items[0].description"}},
		{"tax system", `{"customer":{"phone":"79001234567"},"tax_system_code":7,"items":[` + item("1", 49900, 1) + `]}`,
			[]string{"receipt.tax_system_code"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "bad-receipt-"+tc.name, receiptBody(tc.receipt))
			require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
			for _, f := range tc.fields {
				require.Contains(t, string(res.body), `"field":"`+f+`"`)
			}
		})
	}
	require.Zero(t, b.count(t, "subscriptions"))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

func itoa(i int) string { return strconv.Itoa(i) }
