package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// succeededCharge creates a subscription for customer and marks its first
// charge captured, as the pipeline would.
func (b testBundle) succeededCharge(t *testing.T, customer string) string {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "sub-"+customer, createBodyFor(customer))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	var id string
	require.NoError(t, b.pool.QueryRow(context.Background(), `UPDATE charges SET status = 'succeeded', attempt_count = 1,
			authorization_ref = 'auth_1'
		WHERE subscription_id = $1 RETURNING id::text`, res.json(t)["id"]).Scan(&id))
	return id
}

func TestRefundsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	support := b.newKey(t, "support", "")
	customer := b.newKey(t, "customer", "cust-r")
	id := b.succeededCharge(t, "cust-r")
	path := "/v1/charges/" + id + "/refunds"

	res := b.do(t, http.MethodPost, path, customer, "r-cust", `{"reason":"requested_by_customer"}`)
	require.Equal(t, http.StatusForbidden, res.status, "a customer cannot refund, even its own charge")
	res = b.do(t, http.MethodPost, path, support, "", `{"reason":"duplicate"}`)
	require.Equal(t, http.StatusBadRequest, res.status, "every POST takes an Idempotency-Key")
	res = b.do(t, http.MethodPost, path, support, "r-bad", `{"amount":100}`)
	require.Equal(t, http.StatusBadRequest, res.status, "reason is required")
	require.Equal(t, "reason", res.json(t)["errors"].([]any)[0].(map[string]any)["field"])
	res = b.do(t, http.MethodPost, path, support, "r-bad2", `{"amount":0,"reason":"duplicate"}`)
	require.Equal(t, http.StatusBadRequest, res.status, "an amount given is positive")

	res = b.do(t, http.MethodPost, path, support, "r1", `{"amount":400,"reason":"requested_by_customer","evidence":"ticket 7"}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	first := res.json(t)
	require.Equal(t, "pending", first["status"])
	require.Equal(t, float64(400), first["amount"])
	require.Equal(t, "USD", first["currency"])
	require.Equal(t, "ticket 7", first["evidence"])
	again := b.do(t, http.MethodPost, path, support, "r1", `{"amount":400,"reason":"requested_by_customer","evidence":"ticket 7"}`)
	require.Equal(t, string(res.body), string(again.body), "replayed under its key, no second refund")

	res = b.do(t, http.MethodPost, path, support, "r2", `{"amount":601,"reason":"duplicate"}`)
	require.Equal(t, http.StatusConflict, res.status)
	p := res.json(t)
	require.Equal(t, "https://rebill.dev/problems/refund-amount-too-large", p["type"])
	require.Equal(t, float64(1000), p["amount_captured"])
	require.Equal(t, float64(400), p["amount_reserved"])
	require.Equal(t, float64(600), p["amount_refundable"])

	res = b.do(t, http.MethodPost, path, support, "r3", `{"reason":"duplicate"}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	require.Equal(t, float64(600), res.json(t)["amount"], "no amount: the rest")
	res = b.do(t, http.MethodPost, path, support, "r4", `{"reason":"duplicate"}`)
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "https://rebill.dev/problems/charge-already-refunded", res.json(t)["type"])

	list := b.do(t, http.MethodGet, path+"?limit=1", customer, "", "")
	require.Equal(t, http.StatusOK, list.status, "the owner reads its charge's refunds")
	page := list.json(t)
	require.Len(t, page["data"], 1)
	require.Equal(t, first["id"], page["data"].([]any)[0].(map[string]any)["id"])
	next := page["next_cursor"].(string)
	list = b.do(t, http.MethodGet, path+"?limit=1&cursor="+next, support, "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Len(t, list.json(t)["data"], 1)
	require.Nil(t, list.json(t)["next_cursor"])
	other := b.newKey(t, "customer", "cust-other")
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, path, other, "", "").status)

	charge := b.do(t, http.MethodGet, "/v1/charges/"+id, support, "", "").json(t)
	require.Equal(t, "succeeded", charge["status"])
	require.Equal(t, float64(0), charge["amount_refunded"], "nothing returned until the gateway says so")
}

func TestRefundsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.succeededCharge(t, "cust-f")
	path := "/v1/charges/" + id + "/refunds"
	ctx := context.Background()

	_, err := b.pool.Exec(ctx, `UPDATE charges SET registry_uin = '18810192085434147023' WHERE id = $1`, id)
	require.NoError(t, err)
	res := b.do(t, http.MethodPost, path, adminKey, "f1", `{"reason":"requested_by_customer"}`)
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "https://rebill.dev/problems/fine-not-refundable", res.json(t)["type"])
	require.Contains(t, res.json(t)["detail"], "state's own procedure")

	_, err = b.pool.Exec(ctx, `UPDATE charges SET registry_uin = NULL, status = 'failed' WHERE id = $1`, id)
	require.NoError(t, err)
	res = b.do(t, http.MethodPost, path, adminKey, "f2", `{"reason":"requested_by_customer"}`)
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "https://rebill.dev/problems/charge-not-refundable", res.json(t)["type"])
	require.Zero(t, b.count(t, "refunds"))
	res = b.do(t, http.MethodPost, fmt.Sprintf("/v1/charges/%s/refunds", "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d"), adminKey, "f3",
		`{"reason":"fraudulent"}`)
	require.Equal(t, http.StatusNotFound, res.status)
}
