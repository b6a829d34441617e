package validate

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkLooksLikeCardNumber measures the filter on what it sees most:
// ids and short texts, and on the inputs that take its slower paths.
func BenchmarkLooksLikeCardNumber(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"uuid", "550e8400-e29b-41d4-a716-446655440000"},
		{"sha-256 hex", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"rfc 3339 time", "2026-12-01T00:00:00.123456789+03:00"},
		{"order number", "order 20261201-000123-45"},
		{"description 500 ascii", string(make500('a'))},
		{"description cyrillic", "Абонемент в спортзал, ежемесячно, договор № 20261201-000123-45 от 01.12.2026"},
		{"card grouped", "4242 4242 4242 4242"},
		{"card full-width with zero-width", "４\u200b２４２４２４２４２４２４２４２４２"},
		{"digits 500", string(make500('7'))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				LooksLikeCardNumber(bc.s)
			}
		})
	}
}

func make500(c byte) []byte {
	s := make([]byte, 500)
	for i := range s {
		s[i] = c
	}
	return s
}

// benchCreateRequest has the shape of POST /v1/subscriptions.
type benchCreateRequest struct {
	CustomerID    string     `json:"customer_id"`
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	Interval      string     `json:"interval"`
	IntervalCount *int       `json:"interval_count"`
	TimeZone      *string    `json:"timezone"`
	BillingAnchor *time.Time `json:"billing_anchor"`
	PaymentMethod *struct {
		Gateway  string `json:"gateway"`
		Token    string `json:"token"`
		Brand    string `json:"brand"`
		Last4    string `json:"last4"`
		ExpMonth int    `json:"exp_month"`
		ExpYear  int    `json:"exp_year"`
	} `json:"payment_method"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

// BenchmarkCreateValidation is what a create request costs before it
// reaches the domain: the card-number search of the body (the HTTP layer
// runs it first) and the strict decode with its character checks.
func BenchmarkCreateValidation(b *testing.B) {
	const base = `{"customer_id":"cust-42","amount":49900,"currency":"RUB","interval":"month",
		"timezone":"Europe/Moscow","billing_anchor":"2026-12-01T00:00:00Z",
		"payment_method":{"gateway":"sim1","token":"tok_ok_visa","brand":"visa","last4":"4242","exp_month":12,"exp_year":2030},
		"description":%s,"metadata":{"order":"550e8400-e29b-41d4-a716-446655440000","ref":"order 20261201-000123-45"}}`
	for _, bc := range []struct{ name, description string }{
		{"ascii", `"Gym, monthly"`},
		{"cyrillic", `"Абонемент в спортзал, ежемесячно, договор № 20261201-000123-45 от 01.12.2026"`},
		{"500 characters", `"` + strings.Repeat("Gym 2026-12-01, ", 31) + `"`},
	} {
		body := []byte(fmt.Sprintf(base, bc.description))
		b.Run(bc.name+"/card search", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, found := FindCardNumber(body); found {
					b.Fatal("refused")
				}
			}
		})
		b.Run(bc.name+"/card search and decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, found := FindCardNumber(body); found {
					b.Fatal("refused")
				}
				var req benchCreateRequest
				if err := Decode(body, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLooksLikeCardNumberWorstCase: a body-sized token of glued runs
// stays linear.
func BenchmarkLooksLikeCardNumberWorstCase(b *testing.B) {
	s := strings.Repeat("a4242424242424241", MaxBodyBytes/17)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		LooksLikeCardNumber(s)
	}
}
