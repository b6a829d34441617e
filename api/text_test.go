package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireCardRefused asserts a 400 card-number-refused naming field, whose
// body does not repeat the number's digits.
func requireCardRefused(t *testing.T, res response, field string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	p := res.json(t)
	require.Equal(t, "https://rebill.dev/problems/card-number-refused", p["type"])
	require.Equal(t, field, p["errors"].([]any)[0].(map[string]any)["field"])
	require.NotContains(t, string(res.body), "4242")
}

// TestCardNumbersAreRefusedWhereverTextIsTyped: the shapes people paste
// card numbers in are refused in bodies, path and query parameters and the
// Idempotency-Key, and nothing of the request is stored.
func TestCardNumbersAreRefusedWhereverTextIsTyped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := func(old, new string) string { return strings.Replace(createBody, old, new, 1) }
	shapes := map[string]string{
		"dots":               "4242.4242.4242.4242",
		"slashes":            "4242/4242/4242/4242",
		"underscores":        "4242_4242_4242_4242",
		"double spaces":      "4242  4242  4242  4242",
		"newlines":           "4242\n4242\n4242\n4242",
		"glued before":       "card4242424242424242",
		"glued after":        "4242424242424242x",
		"full-width":         "４２４２４２４２４２４２４２４２",
		"arabic-indic":       "٤٢٤٢٤٢٤٢٤٢٤٢٤٢٤٢",
		"zero-width between": "4242\u200b4242\u200b4242\u200b4242",
	}
	for name, pan := range shapes {
		quoted := strconv.Quote(pan)
		for field, body := range map[string]string{
			"customer_id":          replace(`"cust-42"`, quoted),
			"description":          replace(`"Gym, monthly"`, quoted),
			"metadata.k":           replace(`{"k":"v"}`, `{"k":`+quoted+`}`),
			"metadata":             replace(`{"k":"v"}`, `{`+quoted+`:"v"}`),
			"payment_method.token": replace(`"tok_ok_visa"`, quoted),
		} {
			res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "card-"+name+"-"+field, body)
			requireCardRefused(t, res, field)
		}
		res := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "card-key-"+name,
			`{"role":"customer","customer_id":`+quoted+`}`)
		requireCardRefused(t, res, "customer_id")
	}
	for _, key := range []string{"4242424242424242", "4242-4242-4242-4242", "4242.4242.4242.4242", "card4242424242424242", `"4242 4242 4242 4242"`} {
		res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, key, createBody)
		requireCardRefused(t, res, "Idempotency-Key")
	}
	res := b.do(t, http.MethodGet, "/v1/subscriptions?customer_id=4242.4242.4242.4242", adminKey, "", "")
	requireCardRefused(t, res, "customer_id")
	res = b.do(t, http.MethodGet, "/v1/subscriptions?note=card4242424242424242", adminKey, "", "")
	requireCardRefused(t, res, "note")
	res = b.do(t, http.MethodGet, "/v1/charges/4242424242424242", adminKey, "", "")
	requireCardRefused(t, res, "id")
	res = b.do(t, http.MethodPost, "/v1/enrollments/0193a5d0-0000-7000-8000-000000000000/bills/4242%2F4242%2F4242%2F4242/confirm",
		adminKey, "card-path", "")
	requireCardRefused(t, res, "bill_id")

	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "api_keys"))
	require.Zero(t, b.count(t, "idempotency_keys"), "no key, and no card number as a key, is stored")

	// Ordinary text with long digit runs (order numbers, phone numbers) and
	// ids that look long: none is a card number, so none is refused.
	body := replace(`"Gym, monthly"`, `"order 20261201-000123-45, call +7 (495) 123-45-67"`)
	body = strings.Replace(body, `{"k":"v"}`, `{"ulid":"01JF4242424242424242XYZABC","sha1":"da39a3ee5e6b4b0d3255bfef95601890afd80709","at":"2026-12-01T00:00:00.123456789Z"}`, 1)
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "order 20261201-000123-45", body)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
}

// TestControlCharactersAreRefusedInStoredText: free text refuses controls,
// U+2028, noncharacters and bidi overrides, naming the field; ids of only
// spaces are refused; nothing is stored. Harmless format characters pass.
func TestControlCharactersAreRefusedInStoredText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := func(old, new string) string { return strings.Replace(createBody, old, new, 1) }
	cases := map[string]struct{ body, field string }{
		"ESC in description":        {replace(`"Gym, monthly"`, `"Gym\u001b[2J"`), "description"},
		"BEL in description":        {replace(`"Gym, monthly"`, `"Gym\u0007"`), "description"},
		"DEL in description":        {replace(`"Gym, monthly"`, `"Gym\u007f"`), "description"},
		"CSI in metadata value":     {replace(`{"k":"v"}`, `{"k":"v\u009b31m"}`), "metadata.k"},
		"NEL in metadata value":     {replace(`{"k":"v"}`, `{"k":"a\u0085b"}`), "metadata.k"},
		"U+FFFF in description":     {replace(`"Gym, monthly"`, `"Gym\uffff"`), "description"},
		"U+2028 in description":     {replace(`"Gym, monthly"`, `"Gym\u2028monthly"`), "description"},
		"RLO in metadata key":       {replace(`{"k":"v"}`, `{"gpj\u202eexe":"v"}`), "metadata"},
		"RLI in description":        {replace(`"Gym, monthly"`, `"\u2067Gym\u2069"`), "description"},
		"LRE in receipt-less value": {replace(`{"k":"v"}`, `{"k":"\u202a"}`), "metadata.k"},
		"tab in customer_id":        {replace(`"cust-42"`, `"cust\t42"`), "customer_id"},
		"spaces as customer_id":     {replace(`"cust-42"`, `"   "`), "customer_id"},
		"spaces as token":           {replace(`"tok_ok_visa"`, `"  "`), "payment_method.token"},
	}
	for name, tc := range cases {
		res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "ctl-"+name, tc.body)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		p := res.json(t)
		require.Equal(t, "https://rebill.dev/problems/validation-error", p["type"], name)
		fields := []string{}
		for _, e := range p["errors"].([]any) {
			fields = append(fields, e.(map[string]any)["field"].(string))
		}
		require.Contains(t, fields, tc.field, name)
	}
	res := b.do(t, http.MethodPost, "/v1/api-keys", adminKey, "ctl-key", `{"role":"customer","customer_id":"   "}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, `"   "`, createBody)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	require.Contains(t, string(res.body), "idempotency-key-invalid")
	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "api_keys"))
	require.Zero(t, b.count(t, "idempotency_keys"))

	ok := replace(`"Gym, monthly"`, `"👩\u200d💻 Abon\u00adnement می\u200cخواهم \u200fשלום\u200f\ttab\r\nline"`)
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "ctl-ok", ok)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	require.Contains(t, string(res.body), "\u200d")
}
