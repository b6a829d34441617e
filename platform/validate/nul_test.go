package validate

import (
	"testing"

	"github.com/rebill/rebill/rebilltype"
	"github.com/stretchr/testify/require"
)

// PostgreSQL refuses NUL in text, so a string holding \u0000 would reach
// the database and fail there as a 500; every string is checked at the
// door instead, wherever it sits.
func TestDecodeRefusesNUL(t *testing.T) {
	t.Parallel()
	const (
		msgNUL    = `must not contain the NUL character (\u0000)`
		msgNULKey = `keys must not contain the NUL character (\u0000)`
	)
	tests := []struct {
		name string
		body string
		errs []rebilltype.FieldError
	}{
		{"top-level string", `{"customer_id":"c\u0000"}`,
			[]rebilltype.FieldError{{Field: "customer_id", Message: msgNUL}}},
		{"nested string", `{"payment_method":{"token":"\u0000tok"}}`,
			[]rebilltype.FieldError{{Field: "payment_method.token", Message: msgNUL}}},
		{"pointer to string", `{"payment_method":{"brand":"vi\u0000sa"}}`,
			[]rebilltype.FieldError{{Field: "payment_method.brand", Message: msgNUL}}},
		{"map value", `{"metadata":{"k":"v\u0000"}}`,
			[]rebilltype.FieldError{{Field: "metadata.k", Message: msgNUL}}},
		{"map key", `{"metadata":{"k\u0000":"v"}}`,
			[]rebilltype.FieldError{{Field: "metadata", Message: msgNULKey}}},
		{"slice element", `{"tags":["a","\u0000"]}`,
			[]rebilltype.FieldError{{Field: "tags[1]", Message: msgNUL}}},
		{"key of a nested object", `{"payment_method":{"tok\u0000en":"x"}}`,
			[]rebilltype.FieldError{{Field: "payment_method", Message: msgNULKey}}},
		{"top-level key", `{"\u0000":1}`,
			[]rebilltype.FieldError{{Field: "", Message: msgNULKey}}},
		// NUL is looked for before the decode, so it is reported also where
		// the decode would refuse the field.
		{"under an unknown field", `{"extra":{"x":["\u0000"]}}`,
			[]rebilltype.FieldError{{Field: "extra.x[0]", Message: msgNUL}}},
		{"in a value of the wrong type", `{"amount":"\u0000"}`,
			[]rebilltype.FieldError{{Field: "amount", Message: msgNUL}}},
		{"timestamp", `{"billing_anchor":"2026-12-01T00:00:00Z\u0000"}`,
			[]rebilltype.FieldError{{Field: "billing_anchor", Message: msgNUL}}},
		{"several", `{"customer_id":"\u0000","currency":"\u0000"}`,
			[]rebilltype.FieldError{{Field: "customer_id", Message: msgNUL}, {Field: "currency", Message: msgNUL}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got testRequest
			err := Decode([]byte(tc.body), &got)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.errs, de.Errors)
		})
	}
	var ok testRequest
	require.NoError(t, Decode([]byte(`{"customer_id":"c\t\n\r\u00e9\u200d\u200c\u200e\u00ad"}`), &ok),
		"tab, line breaks and the harmless format characters are the fields' own business")
}
