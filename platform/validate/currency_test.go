package validate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCurrency(t *testing.T) {
	t.Parallel()

	tests := []struct {
		code  string
		units int
		ok    bool
	}{
		{"RUB", 2, true}, {"USD", 2, true}, {"EUR", 2, true}, {"GBP", 2, true},
		{"JPY", 0, true}, {"KRW", 0, true}, {"VND", 0, true}, {"ISK", 0, true}, {"CLP", 0, true},
		{"XAF", 0, true}, {"XOF", 0, true}, {"XPF", 0, true},
		{"KWD", 3, true}, {"BHD", 3, true}, {"JOD", 3, true}, {"OMR", 3, true}, {"TND", 3, true}, {"IQD", 3, true}, {"LYD", 3, true},
		{"CLF", 4, true},
		{"XCD", 2, true}, {"XCG", 2, true}, {"ZWG", 2, true}, {"SLE", 2, true}, {"VED", 2, true}, {"VES", 2, true},

		// Lower or mixed case, wrong length, padding.
		{code: "usd"}, {code: "Usd"}, {code: ""}, {code: "US"}, {code: "USDD"}, {code: " USD"}, {code: "USD "},
		// Not currencies one can charge.
		{code: "XAU"}, {code: "XAG"}, {code: "XPT"}, {code: "XPD"}, {code: "XTS"}, {code: "XXX"},
		{code: "XBA"}, {code: "XBB"}, {code: "XBC"}, {code: "XBD"}, {code: "XDR"}, {code: "XSU"}, {code: "XUA"}, {code: "XAD"},
		{code: "USN"}, {code: "BOV"}, {code: "CHE"}, {code: "CHW"}, {code: "COU"}, {code: "MXV"}, {code: "UYI"}, {code: "UYW"},
		// Withdrawn.
		{code: "ANG"}, {code: "BGN"}, {code: "HRK"}, {code: "CUC"}, {code: "SLL"}, {code: "ZWL"}, {code: "RUR"}, {code: "VEF"}, {code: "MRO"},
		// Not ISO 4217.
		{code: "BTC"}, {code: "RMB"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			t.Parallel()
			units, ok := Currency(tt.code)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.units, units)
		})
	}
}

func TestCurrencyTable(t *testing.T) {
	t.Parallel()

	// ISO 4217 List One has 178 codes; 22 are refused (see Currency).
	require.Len(t, currencies, 156)
	for code, units := range currencies {
		require.Len(t, code, 3, code)
		for i := range 3 {
			require.True(t, 'A' <= code[i] && code[i] <= 'Z', code)
		}
		require.Contains(t, []int{0, 2, 3, 4}, units, code)
	}
}
