package validate

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

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
		{name: "dots", s: "4242.4242.4242.4242", want: true},
		{name: "slashes", s: "4242/4242/4242/4242", want: true},
		{name: "underscores", s: "4242_4242_4242_4242", want: true},
		{name: "double spaces", s: "4242  4242  4242  4242", want: true},
		{name: "newlines", s: "4242\n4242\n4242\n4242", want: true},
		{name: "crlf", s: "4242\r\n4242\r\n4242\r\n4242", want: true},
		{name: "spaced dashes", s: "4242 - 4242 - 4242 - 4242", want: true},
		{name: "amex 15", s: "378282246310005", want: true},
		{name: "amex grouped 4-6-5", s: "3782 822463 10005", want: true},
		{name: "diners grouped 4-6-4", s: "3622 720627 1667", want: true},
		{name: "19 digits grouped 4-4-4-4-3", s: "6221 2600 0000 0000 001", want: true},
		{name: "discover", s: "6011111111111117", want: true},
		{name: "mastercard", s: "5555555555554444", want: true},
		{name: "mastercard 2-series", s: "2223003122003222", want: true},
		{name: "visa 13", s: "4222222222222", want: true},
		{name: "19 digits", s: "6221260000000000001", want: true},
		{name: "in a sentence", s: "card 4111 1111 1111 1111 please", want: true},
		{name: "after a colon", s: "pan:4111111111111111", want: true},
		{name: "at the end of a sentence", s: "my card is 4111111111111111.", want: true},
		{name: "in a token-like string", s: "tok_4242424242424242", want: true},
		{name: "glued to a word before", s: "card4242424242424242", want: true},
		{name: "glued to a letter after", s: "4242424242424242x", want: true},
		{name: "glued to cyrillic", s: "карта4242424242424242", want: true},
		{name: "negative number", s: "-4242424242424242", want: true},
		{name: "second run of several", s: "order 12345, card 4242424242424242", want: true},
		{name: "next to a uuid", s: "4242424242424242 550e8400-e29b-41d4-a716-446655440000", want: true},
		{name: "after a date", s: "2026-12-01 4242 4242 4242 4242", want: true},
		{name: "before a date", s: "4242 4242 4242 4242-2026", want: true},
		{name: "full-width digits", s: "４２４２４２４２４２４２４２４２", want: true},
		{name: "full-width grouped", s: "４２４２ ４２４２ ４２４２ ４２４２", want: true},
		{name: "arabic-indic digits", s: "٤٢٤٢٤٢٤٢٤٢٤٢٤٢٤٢", want: true},
		{name: "devanagari digits", s: "४२४२४२४२४२४२४२४२", want: true},
		{name: "mathematical bold digits", s: "𝟒𝟐𝟒𝟐𝟒𝟐𝟒𝟐𝟒𝟐𝟒𝟐𝟒𝟐𝟒𝟐", want: true},
		{name: "zero-width spaces", s: "4\u200b2\u200b4\u200b2\u200b4242\u200b4242\u200b4242", want: true},
		{name: "zero-width joiners between groups", s: "4242\u200d4242\u200d4242\u200d4242", want: true},
		{name: "soft hyphens", s: "4242\u00ad4242\u00ad4242\u00ad4242", want: true},
		{name: "byte order marks", s: "\ufeff4242\ufeff4242\ufeff4242\ufeff4242", want: true},
		{name: "no-break spaces", s: "4242\u00a04242\u00a04242\u00a04242", want: true},
		{name: "en dashes", s: "4242\u20134242\u20134242\u20134242", want: true},
		{name: "keycap emoji", s: "4\ufe0f\u20e32\ufe0f\u20e34\ufe0f\u20e32\ufe0f\u20e3424242424242", want: true},
		{name: "ogrn passing luhn with a maestro prefix (trade-off)", s: "5077746887390", want: true},
		{name: "a hex letter glued before", s: "a4242424242424242", want: true},
		{name: "a hex letter glued after", s: "4242424242424242f", want: true},
		{name: "one letter glued after", s: "4111111111111111a", want: true},
		{name: "three letters glued before", s: "abc4111111111111111", want: true},
		{name: "hex letters glued to a group", s: "a4111 1111 1111 1111", want: true},
		{name: "31 hex characters are no digest", s: "deadbeef4242424242424242cafebab", want: true},
		{name: "ten capitals glued after, ulid-shaped", s: "4111111111111111ABCDEFGHJK", want: true},
		{name: "ten capitals in lower case", s: "4111111111111111abcdefghjk", want: true},
		{name: "integer part of a decimal", s: "4111111111111111.5", want: true},
		{name: "spaced double dashes", s: "4111 -- 1111 -- 1111 -- 1111", want: true},
		{name: "a row of dashes", s: "4111----1111----1111----1111", want: true},
		{name: "blank lines", s: "4111\r\n\r\n1111\r\n\r\n1111\r\n\r\n1111", want: true},
		{name: "percent-encoded spaces", s: "4111%201111%201111%201111", want: true},
		{name: "percent-encoded dashes", s: "4111%2d1111%2D1111%2d1111", want: true},
		{name: "percent-encoded no-break spaces", s: "4111%C2%A01111%C2%A01111%C2%A01111", want: true},
		{name: "percent-encoded digits", s: "%34%31%31%31%31%31%31%31%31%31%31%31%31%31%31%31", want: true},
		{name: "html decimal reference", s: "4111&#32;1111&#32;1111&#32;1111", want: true},
		{name: "html hex reference", s: "4111&#x20;1111&#x20;1111&#x20;1111", want: true},
		{name: "html named reference", s: "4111&nbsp;1111&nbsp;1111&nbsp;1111", want: true},
		{name: "html dash reference", s: "4111&ndash;1111&ndash;1111&ndash;1111", want: true},
		{name: "html references of digits", s: "&#52;11111111111111&#x31;", want: true},
		{name: "zero-width inside escapes", s: "4111%\u200b201111&nb\u200bsp;1111%20\u200b1111", want: true},
		{name: "an escaped zero-width space", s: "4111&#8203;1111&#x200b;1111%E2%80%8B1111", want: true},
		{name: "ogrnip passing luhn with a diners prefix (trade-off)", s: "304500000000010", want: true},

		{name: "empty", s: ""},
		{name: "fails luhn", s: "4242424242424241"},
		{name: "fails luhn with spaces", s: "4242 4242 4242 4241"},
		{name: "luhn but no issuer: starts with 1", s: "1000000000000008"},
		{name: "luhn but no issuer: starts with 7", s: "7000000000000005"},
		{name: "luhn but no issuer: 2100", s: "2100000000000005"},
		{name: "test token", s: "tok_ok"},
		{name: "customer id", s: "cust-42"},
		{name: "metadata value", s: "Gym, monthly"},
		{name: "12 digits", s: "424242424242"},
		{name: "20 digits passing luhn", s: "42424242424242424242"},
		{name: "uin of 20 digits", s: "18810177150000000010"},
		{name: "account number in groups of four", s: "4081 7810 0999 1000 4317"},
		{name: "five groups of four", s: "4242 4242 4242 4242 4242"},
		{name: "mixed separators are not one layout", s: "4242 4242-4242 4242"},
		{name: "uneven spacing is not one layout", s: "4242  4242 4242 4242"},
		{name: "8-8 is not a layout", s: "42424242 42424242"},
		{name: "separator at the end is not part of the run", s: "4242-4242-4242-4241-"},
		{name: "leading zero", s: "0000000042424242"},
		{name: "all zeros", s: "0000 0000 0000 0000"},
		{name: "uuid v4", s: "550e8400-e29b-41d4-a716-446655440000"},
		{name: "uuid whose digit groups pass luhn", s: "42424242-4242-4242-abcd-0123456789ab"},
		{name: "uuid with a 4-4-4-4 run of digits", s: "abcd4242-4242-4242-4242-4242abcdabcd"},
		{name: "upper-case uuid", s: "42424242-4242-4242-ABCD-0123456789AB"},
		{name: "hex digest", s: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{name: "hex digest of 32 with a luhn run", s: "deadbeef4242424242424242cafebabe"},
		{name: "ulid with a luhn run", s: "01JF4242424242424242XYZABC"},
		{name: "ulid in lower case with a luhn run", s: "01jf4242424242424242xyzabc"},
		{name: "float fraction", s: "55.4242424242424242"},
		{name: "fraction without an integer digit before it", s: "0.4111111111111111"},
		{name: "a percent sign", s: "50% off order 4111 1111"},
		{name: "an ampersand", s: "Gym & spa, order 20261201-000123-45"},
		{name: "mixed gaps of dashes", s: "4242 -- 4242 --- 4242 -- 4242"},
		{name: "gap over the bound", s: "4242 ------- 4242 ------- 4242 ------- 4242"},
		{name: "float exponent", s: "4.242424242424242e+15"},
		{name: "iso date", s: "2026-12-01"},
		{name: "rfc 3339 time", s: "2026-12-01T00:00:00Z"},
		{name: "rfc 3339 time with nanoseconds", s: "2026-12-01T00:00:00.123456789+03:00"},
		{name: "unix milliseconds passing luhn", s: "1764547200006"},
		{name: "period key", s: "550e8400-e29b-41d4-a716-446655440000:2026-12-01"},
		{name: "phone number", s: "+7 912 345-67-89"},
		{name: "russian national phone", s: "+7 (495) 123-45-67"},
		{name: "e.164 of 13 digits passing luhn", s: "+4915112345678"},
		{name: "order number", s: "order 20261201-000123-45"},
		{name: "order number with dots", s: "order 2026.12.01.000123.45"},
		{name: "amount", s: "49900"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if strings.Contains(tt.name, "passing luhn") || strings.Contains(tt.name, "luhn but") {
				digits := strings.Map(func(r rune) rune {
					if '0' <= r && r <= '9' {
						return r
					}
					return -1
				}, tt.s)
				require.True(t, luhn([]byte(digits)), "the case must pass Luhn to test anything")
			}
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
		{name: "html-escaped separators", body: `{"note": "4111&nbsp;1111&nbsp;1111&nbsp;1111"}`, wantField: "note", wantFound: true},
		{name: "url-encoded separators", body: `{"note": "4111%201111%201111%201111"}`, wantField: "note", wantFound: true},
		{name: "a long separator", body: `{"note": "4111 -- 1111 -- 1111 -- 1111"}`, wantField: "note", wantFound: true},
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

// TestDecimalDigitRanges: decimalValue relies on every range of unicode.Nd
// being whole runs of ten consecutive digits starting at a zero.
func TestDecimalDigitRanges(t *testing.T) {
	t.Parallel()
	check := func(lo, hi, stride uint32) {
		require.Equal(t, uint32(1), stride, "U+%04X", lo)
		require.Zero(t, (hi-lo+1)%10, "U+%04X..U+%04X", lo, hi)
		require.Equal(t, "0", string(rune('0'+decimalValue(rune(lo)))))
		require.Equal(t, "9", string(rune('0'+decimalValue(rune(hi)))))
	}
	for _, r := range unicode.Nd.R16 {
		check(uint32(r.Lo), uint32(r.Hi), uint32(r.Stride))
	}
	for _, r := range unicode.Nd.R32 {
		check(r.Lo, r.Hi, r.Stride)
	}
	require.Equal(t, "4242", normalizeDigits("٤٢𝟒२"))
}

// FuzzLooksLikeCardNumber: the filter never panics, and a zero-width
// character inserted anywhere (between two characters) changes nothing.
func FuzzLooksLikeCardNumber(f *testing.F) {
	for _, s := range []string{"4242 4242 4242 4242", "card4242424242424242", "order 20261201-000123-45",
		"550e8400-e29b-41d4-a716-446655440000", "４２４２", "+4915112345678", "4111%201111%201111%201111",
		"4111&nbsp;1111&#32;1111&#x20;1111", "4111 -- 1111 -- 1111 -- 1111"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, at uint8) {
		if !utf8.ValidString(s) {
			return
		}
		want := LooksLikeCardNumber(s)
		runes := []rune(s)
		i := int(at) % (len(runes) + 1)
		with := string(runes[:i]) + "\u200b" + string(runes[i:])
		require.Equal(t, want, LooksLikeCardNumber(with), "%q vs %q", s, with)
	})
}
