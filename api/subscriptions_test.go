package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCustomerSeesOnlyItsOwnSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.newKey(t, "customer", "alice")
	bob := b.newKey(t, "customer", "bob")
	support := b.newKey(t, "support", "")

	res := b.do(t, http.MethodPost, "/v1/subscriptions", alice, "a1", createBodyFor("alice"))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	aliceSub := res.json(t)["id"].(string)

	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/subscriptions", bob, "b1", createBodyFor("alice")).status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/subscriptions?customer_id=alice", bob, "", "").status)

	for _, path := range []string{"", "/events", "/charges"} {
		require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/subscriptions/"+aliceSub+path, bob, "", "").status, path)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions/"+aliceSub+path, support, "", "").status, path)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions/"+aliceSub+path, alice, "", "").status, path)
	}
	for _, action := range []string{"pause", "resume", "cancel"} {
		res := b.do(t, http.MethodPost, "/v1/subscriptions/"+aliceSub+"/"+action, bob, "bob-"+action, `{}`)
		require.Equal(t, http.StatusNotFound, res.status, action)
	}
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+aliceSub+"/payment-method", bob, "bob-pm",
		`{"gateway":"sim1","token":"tok_ok_bob","exp_month":1,"exp_year":2031}`)
	require.Equal(t, http.StatusNotFound, res.status)

	list := b.do(t, http.MethodGet, "/v1/subscriptions", bob, "", "").json(t)
	require.Empty(t, list["data"])
	list = b.do(t, http.MethodGet, "/v1/subscriptions", alice, "", "").json(t)
	require.Len(t, list["data"], 1)

	got := b.do(t, http.MethodGet, "/v1/subscriptions/"+aliceSub, alice, "", "").json(t)
	require.Equal(t, "active", got["status"], "bob's attempts changed nothing")

	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/subscriptions/"+aliceSub+"/pause", support, "s-pause", `{}`).status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/api-keys", support, "sk", `{"role":"admin"}`).status)
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/subscriptions", "", "", "").status)
}

func TestSubscriptionLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c", createBody)
	require.Equal(t, http.StatusCreated, res.status)
	sub := res.json(t)
	id := sub["id"].(string)
	require.Equal(t, "/v1/subscriptions/"+id, res.header.Get("Location"))
	require.Equal(t, "2026-12-01", sub["current_period"].(map[string]any)["key"], "Moscow date of 09:00 UTC")
	require.Equal(t, "2027-01-01T09:00:00Z", sub["next_charge_at"], "the first period was charged at once")
	require.Equal(t, 1, b.count(t, "charges"), "its charge was enqueued in the create transaction")
	require.Equal(t, 1, b.count(t, "river_job WHERE kind = 'charge_authorize'"))
	require.NotContains(t, string(res.body), "tok_ok_visa", "the token is write-only")
	require.Nil(t, sub["pause"])

	for i, key := range []string{"p1", "p2"} {
		res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, key, `{"resume_at":"2027-01-15T00:00:00Z"}`)
		require.Equal(t, http.StatusOK, res.status, "pause #%d", i)
		require.Equal(t, "paused", res.json(t)["status"])
	}
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/resume", adminKey, "r1", `{}`)
	require.Equal(t, "active", res.json(t)["status"])
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/cancel", adminKey, "x1", `{"at_period_end":true}`)
	require.Equal(t, true, res.json(t)["cancel_at_period_end"])
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/cancel", adminKey, "x2", `{}`)
	require.Equal(t, "cancelled", res.json(t)["status"])
	require.NotNil(t, res.json(t)["cancelled_at"])

	events := b.do(t, http.MethodGet, "/v1/subscriptions/"+id+"/events", adminKey, "", "").json(t)["data"].([]any)
	var types []string
	for _, e := range events {
		ev := e.(map[string]any)
		types = append(types, ev["type"].(string))
		require.Equal(t, "bootstrap-admin", ev["actor"].(map[string]any)["id"])
	}
	require.Equal(t, []string{"created", "paused", "resumed", "cancel_scheduled", "cancelled"}, types)
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 0; i < 5; i++ {
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c"+string(rune('a'+i)), createBodyFor("cust-p")).status)
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		path := "/v1/subscriptions?limit=2&customer_id=cust-p"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		page := b.do(t, http.MethodGet, path, adminKey, "", "").json(t)
		pages++
		for _, s := range page["data"].([]any) {
			id := s.(map[string]any)["id"].(string)
			require.False(t, seen[id])
			seen[id] = true
		}
		if page["next_cursor"] == nil {
			break
		}
		cursor = page["next_cursor"].(string)
	}
	require.Len(t, seen, 5)
	require.Equal(t, 3, pages)
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodGet, "/v1/subscriptions?cursor=!!", adminKey, "", "").status)
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodGet, "/v1/subscriptions?limit=101", adminKey, "", "").status)
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodGet, "/v1/subscriptions?status=zombie", adminKey, "", "").status)
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := func(old, new string) string { return strings.Replace(createBody, old, new, 1) }
	cases := map[string]struct {
		body   string
		status int
	}{
		"unknown field":          {replace(`"amount"`, `"colour":"red","amount"`), 400},
		"unknown nested field":   {replace(`"brand"`, `"cvv":"123","brand"`), 400},
		"float amount":           {replace("49900", "499.00"), 400},
		"float-looking integer":  {replace("49900", "49900.0"), 400},
		"string amount":          {replace("49900", `"49900"`), 400},
		"zero amount":            {replace("49900", "0"), 400},
		"negative amount":        {replace("49900", "-5"), 400},
		"unknown currency":       {replace(`"RUB"`, `"ABC"`), 400},
		"lower-case currency":    {replace(`"RUB"`, `"rub"`), 400},
		"bad interval":           {replace(`"month"`, `"fortnight"`), 400},
		"bad time zone":          {replace(`"Europe/Moscow"`, `"Mars/Olympus"`), 400},
		"expired card":           {replace(`"exp_year":2030`, `"exp_year":2025`), 400},
		"unknown gateway":        {replace(`"sim1"`, `"paypal9"`), 400},
		"card number as token":   {replace(`"tok_ok_visa"`, `"4242424242424242"`), 400},
		"card number spaced":     {replace(`"Gym, monthly"`, `"card 4242 4242 4242 4242"`), 400},
		"card number in meta":    {replace(`{"k":"v"}`, `{"k":"5555-5555-5555-4444"}`), 400},
		"not json":               {`{"customer_id":`, 400},
		"array body":             {`[1,2]`, 400},
		"trailing data":          {createBody + `{}`, 400},
		"missing payment method": {`{"customer_id":"c","amount":1,"currency":"USD","interval":"day"}`, 400},
		"anchor in the past":     {replace(`"timezone"`, `"billing_anchor":"2020-01-01T00:00:00Z","timezone"`), 400},
		"interval_count zero":    {replace(`"interval":"month"`, `"interval":"month","interval_count":0`), 400},
		"body over 64 KiB":       {replace(`"Gym, monthly"`, `"`+strings.Repeat("x", 70<<10)+`"`), 413},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "bad-"+name, tc.body)
			require.Equal(t, tc.status, res.status, string(res.body))
			require.Equal(t, "application/problem+json", res.header.Get("Content-Type"))
			p := res.json(t)
			require.EqualValues(t, tc.status, p["status"])
			require.NotEmpty(t, p["type"])
			require.NotEmpty(t, p["title"])
		})
	}
	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "subscription_events"))
	require.Zero(t, b.count(t, "idempotency_keys"))
	logs := b.logs.String()
	for _, secret := range []string{"4242424242424242", "4242 4242 4242 4242", "5555-5555-5555-4444", "tok_ok_visa"} {
		require.NotContains(t, logs, secret)
	}
}

func TestLogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "log-1", strings.Replace(createBody, "tok_ok_visa", "tok_ok_SECRET_TOKEN", 1))
	require.Equal(t, http.StatusCreated, res.status)
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "log-2", strings.Replace(createBody, "Gym, monthly", "4111111111111111", 1))
	require.Equal(t, http.StatusBadRequest, res.status)
	b.do(t, http.MethodGet, "/v1/subscriptions", "rbk_not_a_real_key_SECRET", "", "")

	logs := b.logs.String()
	require.Contains(t, logs, `"route":"/v1/subscriptions"`, "requests are logged")
	require.Contains(t, logs, `"api_key_id":"bootstrap-admin"`)
	for _, secret := range []string{"tok_ok_SECRET_TOKEN", "4111111111111111", "rbk_not_a_real_key_SECRET", adminKey} {
		require.NotContains(t, logs, secret)
	}
}

func TestUnknownRoutesAndDevEndpointsAre404(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/dev/clock", adminKey, "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPost, "/v1/dev/clock", adminKey, "k", `{"advance":"1h"}`).status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/nothing", "", "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/subscriptions/not-a-uuid", adminKey, "", "").status)
}
