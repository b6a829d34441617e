package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

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
	Extra         any                `json:"extra"`
}

func TestDecode(t *testing.T) {
	t.Parallel()

	anchor := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	visa := "visa"
	one := 1

	tests := []struct {
		name string
		body string
		want testRequest  // checked when wantErrs is nil
		errs []FieldError // the expected DecodeError.Errors
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
				"metadata": {"k": "v"}, "tags": ["a", "b"], "extra": {"x": [1, "y", null]}
			}`,
			want: testRequest{
				CustomerID: "cust-42", Amount: 49900, Currency: "RUB",
				IntervalCount: &one, Rate: 1.5, AtPeriodEnd: true,
				BillingAnchor: &anchor,
				PaymentMethod: &testPaymentMethod{Gateway: "sim1", Token: "tok_ok", Brand: &visa, ExpMonth: 12, ExpYear: 2030},
				Metadata:      map[string]string{"k": "v"}, Tags: []string{"a", "b"},
				Extra: map[string]any{"x": []any{1.0, "y", nil}},
			},
		},
		{name: "negative integer", body: `{"amount": -5}`, want: testRequest{Amount: -5}},
		{name: "largest int64", body: `{"amount": 9223372036854775807}`, want: testRequest{Amount: 9223372036854775807}},
		{name: "float field takes exponent", body: `{"rate": 1e2}`, want: testRequest{Rate: 100}},
		{name: "trailing whitespace", body: "{\"amount\": 1}\n\n", want: testRequest{Amount: 1}},
		{
			name: "null leaves zero values",
			body: `{"customer_id": null, "amount": null, "payment_method": null, "metadata": null, "tags": null, "billing_anchor": null, "at_period_end": null}`,
		},
		{name: "same key in different objects", body: `{"metadata": {"amount": "1"}, "amount": 1}`, want: testRequest{Amount: 1, Metadata: map[string]string{"amount": "1"}}},

		// Not an object.
		{name: "null body", body: "null", errs: []FieldError{{"", "body must be a JSON object"}}},
		{name: "array body", body: `[{"amount": 1}]`, errs: []FieldError{{"", "body must be a JSON object"}}},
		{name: "string body", body: `"x"`, errs: []FieldError{{"", "body must be a JSON object"}}},
		{name: "number body", body: `42`, errs: []FieldError{{"", "body must be a JSON object"}}},
		{name: "byte order mark", body: "\ufeff{}", errs: []FieldError{{"", "body must be a JSON object"}}},
		{name: "second object", body: `{"amount": 1}{"amount": 2}`, errs: []FieldError{{"", "unexpected data after the JSON object"}}},
		{name: "trailing garbage", body: `{"amount": 1} x`, errs: []FieldError{{"", "unexpected data after the JSON object"}}},
		{name: "trailing bracket", body: `{"amount": 1}]`, errs: []FieldError{{"", "unexpected data after the JSON object"}}},

		// Not JSON.
		{name: "truncated", body: `{"amount": 1`, errs: []FieldError{{"", "invalid JSON: unexpected end of body"}}},
		{name: "truncated string", body: `{"currency": "RU`, errs: []FieldError{{"", "invalid JSON: unexpected end of body"}}},
		{name: "missing value", body: `{"amount": }`, errs: []FieldError{{"", "invalid JSON at byte 12: invalid character '}' looking for beginning of value"}}},
		{name: "trailing comma", body: `{"amount": 1,}`, errs: []FieldError{{"", "invalid JSON at byte 14: invalid character '}' looking for beginning of object key string"}}},
		{name: "single quotes", body: `{'amount': 1}`, errs: []FieldError{{"", "invalid JSON at byte 2: invalid character '\\'' looking for beginning of object key string"}}},
		{name: "leading zero", body: `{"amount": 01}`, errs: []FieldError{{"", "invalid JSON at byte 13: invalid character '1' after object key:value pair"}}},
		{name: "NaN", body: `{"rate": NaN}`, errs: []FieldError{{"", "invalid JSON at byte 10: invalid character 'N' looking for beginning of value"}}},
		{name: "invalid UTF-8", body: "{\"customer_id\": \"\xff\"}", errs: []FieldError{{"", "body is not valid UTF-8"}}},
		{
			name: "field errors give way to a syntax error",
			body: `{"bogus": 1, "amount": "x", "currency": `,
			errs: []FieldError{{"", "invalid JSON: unexpected end of body"}},
		},
		{
			name: "too deep",
			body: `{"extra": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
			errs: []FieldError{{"", "JSON is nested more than 64 levels deep"}},
		},

		// Unknown fields.
		{name: "unknown field", body: `{"amont": 49900}`, errs: []FieldError{{"amont", "unknown field"}}},
		{name: "unknown nested field", body: `{"payment_method": {"token": "tok_ok", "cvv": "123"}}`, errs: []FieldError{{"payment_method.cvv", "unknown field"}}},
		{name: "keys are case-sensitive", body: `{"Amount": 1}`, errs: []FieldError{{"Amount", "unknown field"}}},
		{name: "unknown field with object value", body: `{"x": {"y": [1, {"z": 2}]}}`, errs: []FieldError{{"x", "unknown field"}}},

		// Duplicate keys.
		{name: "duplicate key", body: `{"amount": 1, "amount": 2}`, errs: []FieldError{{"amount", "duplicate key"}}},
		{name: "duplicate key spelled with an escape", body: `{"amount": 1, "\u0061mount": 2}`, errs: []FieldError{{"amount", "duplicate key"}}},
		{name: "duplicate nested key", body: `{"payment_method": {"token": "a", "token": "b"}}`, errs: []FieldError{{"payment_method.token", "duplicate key"}}},
		{name: "duplicate map key", body: `{"metadata": {"k": "a", "k": "b"}}`, errs: []FieldError{{"metadata.k", "duplicate key"}}},
		{name: "duplicate key inside any", body: `{"extra": [{"a": 1, "a": 1}]}`, errs: []FieldError{{"extra[0].a", "duplicate key"}}},
		{name: "duplicate key below an unknown field", body: `{"x": {"a": 1, "a": 2}}`, errs: []FieldError{{"x", "unknown field"}, {"x.a", "duplicate key"}}},
		{name: "duplicate unknown field", body: `{"x": 1, "x": 2}`, errs: []FieldError{{"x", "unknown field"}, {"x", "duplicate key"}}},

		// Wrong types.
		{name: "string for integer", body: `{"amount": "49900"}`, errs: []FieldError{{"amount", "must be an integer"}}},
		{name: "bool for integer", body: `{"amount": true}`, errs: []FieldError{{"amount", "must be an integer"}}},
		{name: "integer for string", body: `{"currency": 643}`, errs: []FieldError{{"currency", "must be a string"}}},
		{name: "string for bool", body: `{"at_period_end": "true"}`, errs: []FieldError{{"at_period_end", "must be a boolean"}}},
		{name: "string for number", body: `{"rate": "1.5"}`, errs: []FieldError{{"rate", "must be a number"}}},
		{name: "string for object", body: `{"payment_method": "tok_ok"}`, errs: []FieldError{{"payment_method", "must be an object"}}},
		{name: "array for object", body: `{"payment_method": []}`, errs: []FieldError{{"payment_method", "must be an object"}}},
		{name: "object for integer", body: `{"amount": {"value": 1, "value": 2}}`, errs: []FieldError{{"amount", "must be an integer"}, {"amount.value", "duplicate key"}}},
		{name: "nested wrong type", body: `{"payment_method": {"exp_month": "12"}}`, errs: []FieldError{{"payment_method.exp_month", "must be an integer"}}},
		{name: "map value wrong type", body: `{"metadata": {"k": 1}}`, errs: []FieldError{{"metadata.k", "must be a string"}}},
		{name: "string for array", body: `{"tags": "a"}`, errs: []FieldError{{"tags", "must be an array"}}},
		{name: "array element wrong type", body: `{"tags": ["a", 2]}`, errs: []FieldError{{"tags[1]", "must be a string"}}},
		{name: "bad timestamp", body: `{"billing_anchor": "tomorrow"}`, errs: []FieldError{{"billing_anchor", "must be an RFC 3339 timestamp"}}},
		{name: "number for timestamp", body: `{"billing_anchor": 1764547200}`, errs: []FieldError{{"billing_anchor", "must be an RFC 3339 timestamp"}}},
		{name: "number out of range for any", body: `{"extra": 1e400}`, errs: []FieldError{{"extra", "number is out of range"}}},
		{name: "float out of range", body: `{"rate": -1e309}`, errs: []FieldError{{"rate", "number is out of range"}}},

		// Integers written as floats.
		{name: "decimal point", body: `{"amount": 49900.0}`, errs: []FieldError{{"amount", "must be an integer (no decimal point or exponent)"}}},
		{name: "fraction", body: `{"amount": 49900.5}`, errs: []FieldError{{"amount", "must be an integer (no decimal point or exponent)"}}},
		{name: "exponent", body: `{"amount": 4.99e4}`, errs: []FieldError{{"amount", "must be an integer (no decimal point or exponent)"}}},
		{name: "integral exponent", body: `{"amount": 1e3}`, errs: []FieldError{{"amount", "must be an integer (no decimal point or exponent)"}}},
		{name: "upper-case exponent", body: `{"amount": 1E3}`, errs: []FieldError{{"amount", "must be an integer (no decimal point or exponent)"}}},
		{name: "pointer integer as float", body: `{"interval_count": 1.0}`, errs: []FieldError{{"interval_count", "must be an integer (no decimal point or exponent)"}}},
		{name: "nested integer as float", body: `{"payment_method": {"exp_year": 2030.0}}`, errs: []FieldError{{"payment_method.exp_year", "must be an integer (no decimal point or exponent)"}}},
		{name: "integer overflow", body: `{"amount": 9223372036854775808}`, errs: []FieldError{{"amount", "integer is out of range"}}},
		{name: "integer underflow", body: `{"amount": -9223372036854775809}`, errs: []FieldError{{"amount", "integer is out of range"}}},

		{
			name: "every field error is listed in body order",
			body: `{"amount": "x", "currency": 1, "bogus": true, "payment_method": {"exp_month": 1.5, "cvv": 1}}`,
			errs: []FieldError{
				{"amount", "must be an integer"},
				{"currency", "must be a string"},
				{"bogus", "unknown field"},
				{"payment_method.exp_month", "must be an integer (no decimal point or exponent)"},
				{"payment_method.cvv", "unknown field"},
			},
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

	t.Run("too many errors", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		b.WriteString("{")
		for i := range 50 {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"x` + strings.Repeat("y", i) + `": 1`)
		}
		b.WriteString("}")
		var dst testRequest
		var de *DecodeError
		require.ErrorAs(t, Decode([]byte(b.String()), &dst), &de)
		require.Len(t, de.Errors, maxFieldErrors)
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

	t.Run("deep but within the limit", func(t *testing.T) {
		t.Parallel()
		body := `{"extra": ` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`
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

	t.Run("map", func(t *testing.T) {
		t.Parallel()
		var dst map[string]int
		require.NoError(t, Decode([]byte(`{"a": 1}`), &dst))
		require.Equal(t, map[string]int{"a": 1}, dst)

		var de *DecodeError
		require.ErrorAs(t, Decode([]byte(`{"a": 1.5}`), &dst), &de)
		require.Equal(t, []FieldError{{"a", "must be an integer (no decimal point or exponent)"}}, de.Errors)
	})
}

type testEmbedded struct {
	Inner    string `json:"inner"`
	Shadowed string `json:"shadowed"`
}

type TestEmbeddedPtr struct {
	Deep int `json:"deep"`
}

type testShapes struct {
	testEmbedded
	*TestEmbeddedPtr
	Shadowed   int    `json:"shadowed"` // shallower: wins over testEmbedded's
	Ignored    string `json:"-"`
	Dash       string `json:"-,"`
	Untagged   string
	Quoted     int64            `json:"quoted,string"`
	Pair       [2]int           `json:"pair"`
	Counts     map[int]string   `json:"counts"`
	Sizes      map[uint8]bool   `json:"sizes"`
	Bytes      []byte           `json:"bytes"`
	Small      int8             `json:"small"`
	Unsigned   uint32           `json:"unsigned"`
	Raw        json.RawMessage  `json:"raw"`
	Nested     map[string][]int `json:"nested"`
	Times      []time.Time      `json:"times"`
	Number     json.Number      `json:"number"`
	unexported string           //nolint:unused // must not be settable from JSON
}

func TestDecodeShapes(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, got testShapes)
		errs  []FieldError
	}{
		{
			name: "promoted and tagged fields",
			body: `{"inner": "i", "deep": 7, "shadowed": 3, "-": "d", "Untagged": "u", "quoted": "42"}`,
			check: func(t *testing.T, got testShapes) {
				require.Equal(t, "i", got.Inner)
				require.Equal(t, 7, got.Deep)
				require.Equal(t, 3, got.Shadowed)
				require.Empty(t, got.testEmbedded.Shadowed)
				require.Equal(t, "d", got.Dash)
				require.Equal(t, "u", got.Untagged)
				require.Equal(t, int64(42), got.Quoted)
			},
		},
		{
			name: "maps, arrays, bytes, raw",
			body: `{"pair": [1, 2], "counts": {"-3": "a"}, "sizes": {"255": true}, "bytes": "aGk=", "raw": {"any": [1.5]}, "nested": {"a": [1]}, "times": ["2026-01-01T00:00:00Z"]}`,
			check: func(t *testing.T, got testShapes) {
				require.Equal(t, [2]int{1, 2}, got.Pair)
				require.Equal(t, map[int]string{-3: "a"}, got.Counts)
				require.Equal(t, map[uint8]bool{255: true}, got.Sizes)
				require.Equal(t, []byte("hi"), got.Bytes)
				require.JSONEq(t, `{"any": [1.5]}`, string(got.Raw))
				require.Equal(t, map[string][]int{"a": {1}}, got.Nested)
				require.Len(t, got.Times, 1)
			},
		},
		{
			name:  "json.Number from a number",
			body:  `{"number": 1.5e3}`,
			check: func(t *testing.T, got testShapes) { require.Equal(t, json.Number("1.5e3"), got.Number) },
		},
		{
			name:  "json.Number from a string",
			body:  `{"number": "-12"}`,
			check: func(t *testing.T, got testShapes) { require.Equal(t, json.Number("-12"), got.Number) },
		},
		{name: "json.Number from a word", body: `{"number": "twelve"}`, errs: []FieldError{{"number", "must be a number"}}},
		{name: "ignored field", body: `{"Ignored": "x"}`, errs: []FieldError{{"Ignored", "unknown field"}}},
		{name: "unexported field", body: `{"unexported": "x"}`, errs: []FieldError{{"unexported", "unknown field"}}},
		{name: "embedded struct name is not a key", body: `{"testEmbedded": {}}`, errs: []FieldError{{"testEmbedded", "unknown field"}}},
		{name: "untagged field by its Go name only", body: `{"untagged": "u"}`, errs: []FieldError{{"untagged", "unknown field"}}},
		{name: "quoted field needs a string", body: `{"quoted": 42}`, errs: []FieldError{{"quoted", "must be a string"}}},
		{name: "quoted field holds an integer", body: `{"quoted": "4.2"}`, errs: []FieldError{{"quoted", "must be an integer (no decimal point or exponent)"}}},
		{name: "quoted field holds a number", body: `{"quoted": "x42"}`, errs: []FieldError{{"quoted", "must be a string holding an integer"}}},
		{name: "quoted field with object", body: `{"quoted": {"a": 1, "a": 1}}`, errs: []FieldError{{"quoted", "must be a string"}, {"quoted.a", "duplicate key"}}},
		{name: "array too long", body: `{"pair": [1, 2, 3]}`, errs: []FieldError{{"pair", "must have at most 2 elements"}}},
		{name: "int map key", body: `{"counts": {"one": "a"}}`, errs: []FieldError{{"counts.one", "key must be an integer in range"}}},
		{name: "uint8 map key out of range", body: `{"sizes": {"256": true}}`, errs: []FieldError{{"sizes.256", "key must be a non-negative integer in range"}}},
		{name: "bytes not base64", body: `{"bytes": "!!"}`, errs: []FieldError{{"bytes", "must be base64"}}},
		{name: "int8 overflow", body: `{"small": 128}`, errs: []FieldError{{"small", "integer is out of range"}}},
		{name: "negative unsigned", body: `{"unsigned": -1}`, errs: []FieldError{{"unsigned", "must be a non-negative integer"}}},
		{name: "negative zero unsigned", body: `{"unsigned": -0}`, errs: []FieldError{{"unsigned", "must be a non-negative integer"}}},
		{name: "duplicate key inside raw", body: `{"raw": {"a": 1, "a": 2}}`, errs: []FieldError{{"raw.a", "duplicate key"}}},
		{name: "bad time in a slice", body: `{"times": ["2026-13-01T00:00:00Z"]}`, errs: []FieldError{{"times[0]", "must be an RFC 3339 timestamp"}}},
		{name: "nested slice element", body: `{"nested": {"a": [1, "2"]}}`, errs: []FieldError{{"nested.a[1]", "must be an integer"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var got testShapes
			err := Decode([]byte(tt.body), &got)
			if tt.errs == nil {
				require.NoError(t, err)
				tt.check(t, got)
				return
			}
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tt.errs, de.Errors)
		})
	}
}

// TestStructFieldsMatchEncodingJSON checks that every key the walker
// accepts is one encoding/json sets: a key the walker knew but the decode
// did not would pass the first pass and fail only in the backstop.
func TestStructFieldsMatchEncodingJSON(t *testing.T) {
	t.Parallel()

	for _, typ := range []any{&testRequest{}, &testShapes{}, &testPaymentMethod{}, &fuzzTarget{}} {
		for key := range structFields(reflect.TypeOf(typ).Elem()) {
			dec := json.NewDecoder(strings.NewReader(`{"` + key + `": null}`))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(typ), "key %q of %T", key, typ)
		}
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
	} {
		var dst testRequest
		err := Decode([]byte(body), &dst)
		require.Error(t, err)
		require.NotContains(t, err.Error(), pan, body)
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	t.Parallel()

	err := &DecodeError{Errors: []FieldError{{"", "body must be a JSON object"}}}
	require.Equal(t, "invalid request body: body must be a JSON object", err.Error())

	err = &DecodeError{Errors: []FieldError{{"amount", "must be an integer"}, {"x", "unknown field"}}}
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
