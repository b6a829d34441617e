package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fuzzPaymentMethod struct {
	Gateway  string `json:"gateway"`
	Token    string `json:"token"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  *int64 `json:"exp_year"`
}

// fuzzTarget has the shapes the API's request types are made of.
type fuzzTarget struct {
	ID            string             `json:"id"`
	Amount        int64              `json:"amount"`
	Count         *int               `json:"count"`
	Zone          *string            `json:"zone"`
	Rate          *float64           `json:"rate"`
	Active        *bool              `json:"active"`
	AtPeriodEnd   bool               `json:"at_period_end"`
	PaymentMethod *fuzzPaymentMethod `json:"payment_method"`
	Nested        struct {
		Deeper struct {
			N int64 `json:"n"`
		} `json:"deeper"`
		S []string `json:"s"`
	} `json:"nested"`
	Metadata map[string]string `json:"metadata"`
	Tags     []string          `json:"tags"`
	At       *time.Time        `json:"at"`
}

// FuzzDecode feeds arbitrary bytes to Decode and the card-number checks.
// Neither may panic; Decode must answer with a DecodeError or
// ErrBodyTooLarge, or leave a value that encodes and decodes again.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"id": "550e8400-e29b-41d4-a716-446655440000", "amount": 49900, "count": 3, "zone": "UTC", "rate": 0.5, "active": true, "at_period_end": true}`,
		`{"payment_method": {"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2030}}`,
		`{"nested": {"deeper": {"n": 1}, "s": ["a"]}}`,
		`{"metadata": {"note": "card 4111 1111 1111 1111"}, "tags": ["x"]}`,
		`{"at": "2026-12-01T00:00:00Z", "rate": 1e400}`,
		`{"metadata": {"a": "1", "a": "2"}}`,
		`{"metadata": {"k\u0000": "v"}, "tags": ["\u0000"]}`,
		`{"amount": 49900.0}`,
		`{"amount": 4.99e4}`,
		`{"amount": "49900"}`,
		`{"amount": 1, "amount": 1}`,
		`{"amount": 1}{}`,
		`{"metadata": {"4242424242424242": "x"}}`,
		`{"a": [[[[[[[[[[[[]]]]]]]]]]]]}`,
		"{\"id\": \"\xff\"}",
		`{"id": "\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		field, found := FindCardNumber(body)
		if !found {
			require.Empty(t, field)
		}
		if LooksLikeCardNumber(string(body)) || found {
			require.True(t, mayHoldCardNumber(body), "the quick check must not miss what the search finds")
		}
		LooksLikeCardNumber(string(body))

		var dst fuzzTarget
		err := Decode(body, &dst)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				require.ErrorIs(t, err, ErrBodyTooLarge)
				return
			}
			require.NotEmpty(t, de.Errors)
			require.LessOrEqual(t, len(de.Errors), maxFieldErrors)
			return
		}

		// Accepted: it was JSON, and encoding/json agrees with it.
		require.True(t, len(body) == 0 || json.Valid(body) || isJSONSpace(body), "accepted invalid JSON %q", body)
		strict := json.NewDecoder(bytes.NewReader(body))
		strict.DisallowUnknownFields()
		var again fuzzTarget
		if !isJSONSpace(body) {
			require.NoError(t, strict.Decode(&again))
		}

		// The result encodes, holds no NUL, and what it encodes to is
		// accepted too.
		out, err := json.Marshal(dst)
		require.NoError(t, err)
		require.NotContains(t, string(out), `\u0000`)
		var back fuzzTarget
		require.NoError(t, Decode(out, &back), "re-encoded %s", out)
	})
}

func isJSONSpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
