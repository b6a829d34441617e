package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/rebill/rebill/rebilltype"
	"github.com/stretchr/testify/require"
)

type testPaymentMethod struct {
	Gateway  string  `json:"gateway"`
	Token    string  `json:"token"`
	Brand    *string `json:"brand"`
	ExpMonth int64   `json:"exp_month"`
	ExpYear  int64   `json:"exp_year"`
}

type testRequest struct {
	CustomerID    string             `json:"customer_id"`
	Amount        int64              `json:"amount"`
	Currency      string             `json:"currency"`
	IntervalCount *int               `json:"interval_count"`
	Rate          float64            `json:"rate"`
	AtPeriodEnd   bool               `json:"at_period_end"`
	BillingAnchor *time.Time         `json:"billing_anchor"`
	PaymentMethod *testPaymentMethod `json:"payment_method"`
	Metadata      map[string]string  `json:"metadata"`
	Tags          []string           `json:"tags"`
}

func TestDecode(t *testing.T) {
	t.Parallel()

	anchor := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	anchorMSK := time.Date(2026, 12, 1, 3, 0, 0, 0, time.FixedZone("", 3*3600))
	visa := "visa"
	one := 1

	tests := []struct {
		name string
		body string
		want testRequest             // checked when wantErrs is nil
		errs []rebilltype.FieldError // the expected DecodeError.Errors
	}{
		{name: "empty body is {}", body: ""},
		{name: "whitespace body is {}", body: " \r\n\t"},
		{name: "empty object", body: "{}"},
		{
			name: "full request",
			body: `{
				"customer_id": "cust-42", "amount": 49900, "currency": "RUB",
				"interval_count": 1, "rate": 1.5, "at_period_end": true,
				"billing_anchor": "2026-12-01T00:00:00Z",
				"payment_method": {"gateway": "sim1", "token": "tok_ok", "brand": "visa", "exp_month": 12, "exp_year": 2030},
				"metadata": {"k": "v"}, "tags": ["a", "b"]
			}`,
			want: testRequest{
				CustomerID: "cust-42", Amount: 49900, Currency: "RUB",
				IntervalCount: &one, Rate: 1.5, AtPeriodEnd: true,
				BillingAnchor: &anchor,
				PaymentMethod: &testPaymentMethod{Gateway: "sim1", Token: "tok_ok", Brand: &visa, ExpMonth: 12, ExpYear: 2030},
				Metadata:      map[string]string{"k": "v"}, Tags: []string{"a", "b"},
			},
		},
		{name: "negative integer", body: `{"amount": -5}`, want: testRequest{Amount: -5}},
		{name: "largest int64", body: `{"amount": 9223372036854775807}`, want: testRequest{Amount: 9223372036854775807}},
		{name: "float field takes exponent", body: `{"rate": 1e2}`, want: testRequest{Rate: 100}},
		{name: "trailing whitespace", body: "{\"amount\": 1}\n\n", want: testRequest{Amount: 1}},
		{
			name: "null leaves zero values",
			body: `{"customer_id": null, "amount": null, "interval_count": null, "payment_method": null, "metadata": null, "tags": null, "billing_anchor": null, "at_period_end": null}`,
		},
		{name: "null inside", body: `{"payment_method": {"brand": null, "exp_month": null}, "metadata": {"k": null}}`, want: testRequest{PaymentMethod: &testPaymentMethod{}, Metadata: map[string]string{"k": ""}}},
		{name: "RFC 3339 with an offset", body: `{"billing_anchor": "2026-12-01T03:00:00+03:00"}`, want: testRequest{BillingAnchor: &anchorMSK}},
		{name: "same key in different objects", body: `{"metadata": {"amount": "1"}, "amount": 1}`, want: testRequest{Amount: 1, Metadata: map[string]string{"amount": "1"}}},

		// Not an object.
		{name: "null body", body: "null", errs: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
		{name: "array body", body: `[{"amount": 1}]`, errs: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
		{name: "string body", body: `"x"`, errs: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
		{name: "number body", body: `42`, errs: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
		{name: "byte order mark", body: "\ufeff{}", errs: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
		{name: "second object", body: `{"amount": 1}{"amount": 2}`, errs: []rebilltype.FieldError{{Field: "", Message: "unexpected data after the JSON object"}}},
		{name: "trailing garbage", body: `{"amount": 1} x`, errs: []rebilltype.FieldError{{Field: "", Message: "unexpected data after the JSON object"}}},
		{name: "trailing bracket", body: `{"amount": 1}]`, errs: []rebilltype.FieldError{{Field: "", Message: "unexpected data after the JSON object"}}},

		// Not JSON: the syntax error alone, whatever else is wrong.
		{name: "truncated", body: `{"amount": 1`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON: unexpected end of body"}}},
		{name: "truncated string", body: `{"currency": "RU`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON: unexpected end of body"}}},
		{name: "missing value", body: `{"amount": }`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 11: missing value after object name"}}},
		{name: "trailing comma", body: `{"amount": 1,}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 12: invalid character ',' at start of value"}}},
		{name: "single quotes", body: `{'amount': 1}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 1: invalid character '\\'' at start of value"}}},
		{name: "leading zero", body: `{"amount": 01}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 12: invalid character '1' after object value (expecting ',' or '}')"}}},
		{name: "NaN", body: `{"rate": NaN}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 9: invalid character 'N' at start of value"}}},
		{name: "invalid UTF-8", body: "{\"customer_id\": \"\xff\"}", errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 17: invalid UTF-8"}}},
		{name: "lone surrogate", body: `{"customer_id": "\ud800"}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 17: invalid escape sequence in a string"}}},
		{name: "bad escape", body: `{"customer_id": "\x41"}`, errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 17: invalid escape sequence in a string"}}},
		{name: "control character in a string", body: "{\"customer_id\": \"a\x01\"}", errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 18: invalid character '\\x01' in string (expecting non-control character)"}}},
		{
			name: "field errors give way to a syntax error",
			body: `{"bogus": 1, "amount": "x", "customer_id": "\u0000", "currency": `,
			errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON: unexpected end of body"}},
		},
		{
			name: "nesting past the library's limit",
			body: `{"x": ` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
			errs: []rebilltype.FieldError{{Field: "", Message: "invalid JSON at offset 10005: exceeded max depth"}},
		},

		// Unknown fields.
		{name: "unknown field", body: `{"amont": 49900}`, errs: []rebilltype.FieldError{{Field: "amont", Message: "unknown field"}}},
		{name: "unknown nested field", body: `{"payment_method": {"token": "tok_ok", "cvv": "123"}}`, errs: []rebilltype.FieldError{{Field: "payment_method.cvv", Message: "unknown field"}}},
		{name: "keys are case-sensitive", body: `{"Amount": 1}`, errs: []rebilltype.FieldError{{Field: "Amount", Message: "unknown field"}}},
		{name: "unknown field with object value", body: `{"x": {"y": [1, {"z": 2}]}}`, errs: []rebilltype.FieldError{{Field: "x", Message: "unknown field"}}},
		{name: "unknown field with a deep value", body: `{"x": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, errs: []rebilltype.FieldError{{Field: "x", Message: "unknown field"}}},

		// Duplicate keys.
		{name: "duplicate key", body: `{"amount": 1, "amount": 2}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "duplicate key"}}},
		{name: "duplicate key spelled with an escape", body: `{"amount": 1, "\u0061mount": 2}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "duplicate key"}}},
		{name: "duplicate nested key", body: `{"payment_method": {"token": "a", "token": "b"}}`, errs: []rebilltype.FieldError{{Field: "payment_method.token", Message: "duplicate key"}}},
		{name: "duplicate map key", body: `{"metadata": {"k": "a", "k": "b"}}`, errs: []rebilltype.FieldError{{Field: "metadata.k", Message: "duplicate key"}}},
		{name: "duplicate key inside an array", body: `{"tags": [{"a": 1, "a": 1}]}`, errs: []rebilltype.FieldError{{Field: "tags[0].a", Message: "duplicate key"}}},
		{name: "duplicate key below an unknown field", body: `{"x": {"a": 1, "a": 2}}`, errs: []rebilltype.FieldError{{Field: "x.a", Message: "duplicate key"}}},
		{name: "duplicate unknown field", body: `{"x": 1, "x": 2}`, errs: []rebilltype.FieldError{{Field: "x", Message: "duplicate key"}}},
		{name: "duplicate key after an unknown field", body: `{"bogus": 1, "amount": 1, "amount": 2}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "duplicate key"}}},

		// Wrong types.
		{name: "string for integer", body: `{"amount": "49900"}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer"}}},
		{name: "bool for integer", body: `{"amount": true}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer"}}},
		{name: "integer for string", body: `{"currency": 643}`, errs: []rebilltype.FieldError{{Field: "currency", Message: "must be a string"}}},
		{name: "string for bool", body: `{"at_period_end": "true"}`, errs: []rebilltype.FieldError{{Field: "at_period_end", Message: "must be a boolean"}}},
		{name: "string for number", body: `{"rate": "1.5"}`, errs: []rebilltype.FieldError{{Field: "rate", Message: "must be a number"}}},
		{name: "string for object", body: `{"payment_method": "tok_ok"}`, errs: []rebilltype.FieldError{{Field: "payment_method", Message: "must be an object"}}},
		{name: "array for object", body: `{"payment_method": []}`, errs: []rebilltype.FieldError{{Field: "payment_method", Message: "must be an object"}}},
		{name: "object for integer", body: `{"amount": {"value": 1}}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer"}}},
		{name: "duplicate key in a value of the wrong type", body: `{"amount": {"value": 1, "value": 2}}`, errs: []rebilltype.FieldError{{Field: "amount.value", Message: "duplicate key"}}},
		{name: "nested wrong type", body: `{"payment_method": {"exp_month": "12"}}`, errs: []rebilltype.FieldError{{Field: "payment_method.exp_month", Message: "must be an integer"}}},
		{name: "map value wrong type", body: `{"metadata": {"k": 1}}`, errs: []rebilltype.FieldError{{Field: "metadata.k", Message: "must be a string"}}},
		{name: "map key of digits is a key", body: `{"metadata": {"7": 1}}`, errs: []rebilltype.FieldError{{Field: "metadata.7", Message: "must be a string"}}},
		{name: "map key with a slash", body: `{"metadata": {"a/b": 1}}`, errs: []rebilltype.FieldError{{Field: "metadata.a/b", Message: "must be a string"}}},
		{name: "map key with a tilde", body: `{"metadata": {"a~b": 1}}`, errs: []rebilltype.FieldError{{Field: "metadata.a~b", Message: "must be a string"}}},
		{name: "string for array", body: `{"tags": "a"}`, errs: []rebilltype.FieldError{{Field: "tags", Message: "must be an array"}}},
		{name: "array element wrong type", body: `{"tags": ["a", 2]}`, errs: []rebilltype.FieldError{{Field: "tags[1]", Message: "must be a string"}}},
		{name: "bad timestamp", body: `{"billing_anchor": "tomorrow"}`, errs: []rebilltype.FieldError{{Field: "billing_anchor", Message: "must be an RFC 3339 timestamp"}}},
		{name: "timestamp without a zone", body: `{"billing_anchor": "2026-12-01T00:00:00"}`, errs: []rebilltype.FieldError{{Field: "billing_anchor", Message: "must be an RFC 3339 timestamp"}}},
		{name: "timestamp with a space", body: `{"billing_anchor": "2026-12-01 00:00:00Z"}`, errs: []rebilltype.FieldError{{Field: "billing_anchor", Message: "must be an RFC 3339 timestamp"}}},
		{name: "number for timestamp", body: `{"billing_anchor": 1764547200}`, errs: []rebilltype.FieldError{{Field: "billing_anchor", Message: "must be an RFC 3339 timestamp"}}},
		{name: "float out of range", body: `{"rate": -1e309}`, errs: []rebilltype.FieldError{{Field: "rate", Message: "number is out of range"}}},

		// Integers written as floats.
		{name: "decimal point", body: `{"amount": 49900.0}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "fraction", body: `{"amount": 49900.5}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "exponent", body: `{"amount": 4.99e4}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "integral exponent", body: `{"amount": 1e3}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "upper-case exponent", body: `{"amount": 1E3}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "pointer integer as float", body: `{"interval_count": 1.0}`, errs: []rebilltype.FieldError{{Field: "interval_count", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "nested integer as float", body: `{"payment_method": {"exp_year": 2030.0}}`, errs: []rebilltype.FieldError{{Field: "payment_method.exp_year", Message: "must be an integer (no decimal point or exponent)"}}},
		{name: "integer overflow", body: `{"amount": 9223372036854775808}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "integer is out of range"}}},
		{name: "integer underflow", body: `{"amount": -9223372036854775809}`, errs: []rebilltype.FieldError{{Field: "amount", Message: "integer is out of range"}}},

		{
			name: "only the first JSON-level error is reported",
			body: `{"amount": "x", "currency": 1, "bogus": true, "payment_method": {"exp_month": 1.5, "cvv": 1}}`,
			errs: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer"}},
		},
		{
			name: "the first error in body order",
			body: `{"payment_method": {"exp_month": 1.5, "cvv": 1}, "amount": "x"}`,
			errs: []rebilltype.FieldError{{Field: "payment_method.exp_month", Message: "must be an integer (no decimal point or exponent)"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var got testRequest
			err := Decode([]byte(tt.body), &got)
			if tt.errs == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tt.errs, de.Errors)
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	t.Parallel()

	t.Run("too many NUL strings", func(t *testing.T) {
		t.Parallel()
		body := `{"tags": [` + strings.Repeat(`"\u0000",`, 49) + `"\u0000"]}`
		var dst testRequest
		var de *DecodeError
		require.ErrorAs(t, Decode([]byte(body), &dst), &de)
		require.Len(t, de.Errors, maxFieldErrors)
		require.Equal(t, rebilltype.FieldError{Field: "tags[19]", Message: msgNUL}, de.Errors[maxFieldErrors-1])
	})

	t.Run("body over the limit", func(t *testing.T) {
		t.Parallel()
		body := `{"customer_id": "` + strings.Repeat("a", MaxBodyBytes) + `"}`
		var dst testRequest
		require.ErrorIs(t, Decode([]byte(body), &dst), ErrBodyTooLarge)
	})

	t.Run("body at the limit", func(t *testing.T) {
		t.Parallel()
		prefix, suffix := `{"customer_id": "`, `"}`
		body := prefix + strings.Repeat("a", MaxBodyBytes-len(prefix)-len(suffix)) + suffix
		require.Len(t, body, MaxBodyBytes)
		var dst testRequest
		require.NoError(t, Decode([]byte(body), &dst))
	})
}

func TestDecodeDst(t *testing.T) {
	t.Parallel()

	for _, dst := range []any{nil, testRequest{}, (*testRequest)(nil)} {
		err := Decode([]byte(`{}`), dst)
		require.Error(t, err)
		var de *DecodeError
		require.False(t, errors.As(err, &de), "a bad dst is the caller's bug, not a 400")
	}
}

func TestDecodeErrorNeverEchoesValues(t *testing.T) {
	t.Parallel()

	const pan = "4242424242424242"
	for _, body := range []string{
		`{"amount": "` + pan + `"}`,
		`{"billing_anchor": "` + pan + `"}`,
		`{"amount": ` + pan + `.0}`,
		`{"tags": "` + pan + `"}`,
		`{"currency": "` + pan,
		`{"customer_id": "\ud800` + pan + `"}`,
		`{"customer_id": "\u12g` + pan + `"}`,
		`{"customer_id": "` + pan + `", "amont": 1}`,
		`{"metadata": {"k": "` + pan + `"}, "metadata": 1}`,
	} {
		var dst testRequest
		err := Decode([]byte(body), &dst)
		require.Error(t, err)
		require.NotContains(t, err.Error(), pan, body)
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	t.Parallel()

	err := &DecodeError{Errors: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}}
	require.Equal(t, "invalid request body: body must be a JSON object", err.Error())

	err = &DecodeError{Errors: []rebilltype.FieldError{{Field: "amount", Message: "must be an integer"}, {Field: "x", Message: "unknown field"}}}
	require.Equal(t, "invalid request body: amount: must be an integer; x: unknown field", err.Error())

	b, jerr := json.Marshal(err.Errors)
	require.NoError(t, jerr)
	require.JSONEq(t, `[{"field": "amount", "message": "must be an integer"}, {"field": "x", "message": "unknown field"}]`, string(b))
}

func TestReadBody(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		r       io.Reader
		wantLen int
		wantErr error
	}{
		{name: "empty", r: strings.NewReader("")},
		{name: "small", r: strings.NewReader(`{"a": 1}`), wantLen: 8},
		{name: "exactly the limit", r: bytes.NewReader(make([]byte, MaxBodyBytes)), wantLen: MaxBodyBytes},
		{name: "one byte over", r: bytes.NewReader(make([]byte, MaxBodyBytes+1)), wantErr: ErrBodyTooLarge},
		{name: "far over", r: io.LimitReader(zeros{}, 1<<30), wantErr: ErrBodyTooLarge},
		{name: "read error", r: iotest.ErrReader(io.ErrClosedPipe), wantErr: io.ErrClosedPipe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b, err := ReadBody(tt.r)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Nil(t, b)
				return
			}
			require.NoError(t, err)
			require.Len(t, b, tt.wantLen)
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
