package validate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLooksLikeCardNumber(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		s    string
		want bool
	}{
		{name: "visa", s: "4242424242424242", want: true},
		{name: "visa with spaces", s: "4242 4242 4242 4242", want: true},
		{name: "visa with dashes", s: "4242-4242-4242-4242", want: true},
		{name: "mixed separators", s: "4242 4242-4242 4242", want: true},
		{name: "amex 15", s: "378282246310005", want: true},
		{name: "amex grouped 4-6-5", s: "3782 822463 10005", want: true},
		{name: "discover", s: "6011111111111117", want: true},
		{name: "mastercard", s: "5555555555554444", want: true},
		{name: "visa 13", s: "4222222222222", want: true},
		{name: "19 digits", s: "6221260000000000001", want: true},
		{name: "in a sentence", s: "card 4111 1111 1111 1111 please", want: true},
		{name: "after a colon", s: "pan:4111111111111111", want: true},
		{name: "at the end of a sentence", s: "my card is 4111111111111111.", want: true},
		{name: "in a token-like string", s: "tok_4242424242424242", want: true},
		{name: "negative number", s: "-4242424242424242", want: true},
		{name: "second run of several", s: "order 12345, card 4242424242424242", want: true},
		{name: "next to a uuid", s: "4242424242424242 550e8400-e29b-41d4-a716-446655440000", want: true},

		{name: "empty", s: ""},
		{name: "fails luhn", s: "4242424242424241"},
		{name: "fails luhn with spaces", s: "4242 4242 4242 4241"},
		{name: "test token", s: "tok_ok"},
		{name: "customer id", s: "cust-42"},
		{name: "metadata value", s: "Gym, monthly"},
		{name: "12 digits", s: "424242424242"},
		{name: "20 digits passing luhn", s: "42424242424242424242"},
		{name: "double space splits the run", s: "4242  4242 4242 4242"},
		{name: "separator at the end is not part of the run", s: "4242-4242-4242-4241-"},
		{name: "dots are not separators", s: "4242.4242.4242.4242"},
		{name: "leading zero", s: "0000000042424242"},
		{name: "all zeros", s: "0000 0000 0000 0000"},
		{name: "uuid v4", s: "550e8400-e29b-41d4-a716-446655440000"},
		{name: "uuid whose digit groups pass luhn", s: "42424242-4242-4242-abcd-0123456789ab"},
		{name: "upper-case uuid", s: "42424242-4242-4242-ABCD-0123456789AB"},
		{name: "glued to a letter before", s: "a4242424242424242"},
		{name: "glued to a letter after", s: "4242424242424242f"},
		{name: "hex digest", s: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{name: "hex digest with a luhn run", s: "deadbeef4242424242424242cafe"},
		{name: "float fraction", s: "55.4242424242424242"},
		{name: "float exponent", s: "4.242424242424242e+15"},
		{name: "iso date", s: "2026-12-01"},
		{name: "rfc 3339 time", s: "2026-12-01T00:00:00Z"},
		{name: "rfc 3339 time with nanoseconds", s: "2026-12-01T00:00:00.123456789+03:00"},
		{name: "period key", s: "550e8400-e29b-41d4-a716-446655440000:2026-12-01"},
		{name: "phone number", s: "+7 912 345-67-89"},
		{name: "amount", s: "49900"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, LooksLikeCardNumber(tt.s), "%q", tt.s)
		})
	}
}

func TestFindCardNumber(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		body      string
		wantField string
		wantFound bool
	}{
		{
			name: "clean subscription",
			body: `{"customer_id": "cust-42", "amount": 49900, "currency": "RUB", "interval": "month",
				"timezone": "Europe/Moscow", "billing_anchor": "2026-12-01T00:00:00Z",
				"payment_method": {"gateway": "sim1", "token": "tok_ok", "brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030},
				"description": "Gym, monthly", "metadata": {"k": "v", "order": "550e8400-e29b-41d4-a716-446655440000"}}`,
		},
		{name: "empty body", body: ``},
		{name: "empty object", body: `{}`},
		{name: "pan in metadata", body: `{"amount": 1, "metadata": {"k": "v", "note": "card 4111 1111 1111 1111"}}`, wantField: "metadata.note", wantFound: true},
		{name: "pan as token", body: `{"payment_method": {"gateway": "sim1", "token": "4242424242424242"}}`, wantField: "payment_method.token", wantFound: true},
		{name: "pan as a number", body: `{"amount": 4242424242424242}`, wantField: "amount", wantFound: true},
		{name: "pan in an unknown field", body: `{"card": "378282246310005"}`, wantField: "card", wantFound: true},
		{name: "pan as a key is not echoed", body: `{"metadata": {"4242424242424242": "x"}}`, wantField: "metadata", wantFound: true},
		{name: "pan as a top-level key", body: `{"4242424242424242": 1}`, wantField: "", wantFound: true},
		{name: "pan in an array", body: `{"tags": ["a", "4242-4242-4242-4242"]}`, wantField: "tags[1]", wantFound: true},
		{name: "pan in an object in an array", body: `{"items": [{"a": 1}, {"b": "6011111111111117"}]}`, wantField: "items[1].b", wantFound: true},
		{name: "path after nested containers", body: `{"a": {"b": [1, [2, {"c": 3}]], "d": {}}, "e": "4242424242424242"}`, wantField: "e", wantFound: true},
		{name: "path inside nested arrays", body: `{"a": [[], [1, "4242424242424242"]]}`, wantField: "a[1][1]", wantFound: true},
		{name: "escaped digits", body: `{"note": "\u0034242424242424242"}`, wantField: "note", wantFound: true},
		{name: "top-level string", body: `"4242424242424242"`, wantField: "", wantFound: true},
		{name: "top-level array", body: `[1, "4242424242424242"]`, wantField: "[1]", wantFound: true},
		{name: "first of two", body: `{"a": "378282246310005", "b": "4242424242424242"}`, wantField: "a", wantFound: true},
		{name: "luhn failure", body: `{"note": "4242424242424241"}`},
		{name: "amount and dates", body: `{"amount": 1764547200000.5, "at": "2026-12-01T00:00:00Z", "n": 12345678901}`},
		{name: "invalid json with a pan", body: `{"note": "4242424242424242`, wantField: "", wantFound: true},
		{name: "invalid json without a pan", body: `{"note": "hello"`},
		{name: "pan after a syntax error", body: `{"a": } "4242424242424242"`, wantField: "", wantFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			field, found := FindCardNumber([]byte(tt.body))
			require.Equal(t, tt.wantFound, found)
			require.Equal(t, tt.wantField, field)
		})
	}
}

func TestFindCardNumberDeep(t *testing.T) {
	t.Parallel()

	// Deep nesting must neither recurse nor fail.
	body := strings.Repeat(`{"a": [`, 10000) + `"4242424242424242"` + strings.Repeat(`]}`, 10000)
	field, found := FindCardNumber([]byte(body))
	require.True(t, found)
	require.True(t, strings.HasPrefix(field, "a[0].a[0]"))
}
