package validate

import "testing"

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
