package yookassa

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAmountConversion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		exp      int
		decimal  string
		refused  bool
		readOnly bool // only parsing meets this spelling
	}{
		{minor: 49900, exp: 2, decimal: "499.00"},
		{minor: 1, exp: 2, decimal: "0.01"},
		{minor: 9, exp: 2, decimal: "0.09"},
		{minor: 10, exp: 2, decimal: "0.10"},
		{minor: 99, exp: 2, decimal: "0.99"},
		{minor: 100, exp: 2, decimal: "1.00"},
		{minor: 0, exp: 2, decimal: "0.00"},
		{minor: 123456789, exp: 2, decimal: "1234567.89"},
		{minor: math.MaxInt64, exp: 2, decimal: "92233720368547758.07"},
		{minor: 7, exp: 0, decimal: "7"},
		{minor: 1, exp: 3, decimal: "0.001"},
		{minor: 1500, exp: 3, decimal: "1.500"},
		{minor: 49900, exp: 2, decimal: "499", readOnly: true},
		{minor: 49910, exp: 2, decimal: "499.1", readOnly: true},
		{minor: 0, exp: 2, decimal: "000.00", readOnly: true},
	} {
		if !tc.readOnly {
			got, err := formatMinor(tc.minor, tc.exp)
			require.NoError(t, err)
			require.Equal(t, tc.decimal, got, "format %d with %d places", tc.minor, tc.exp)
		}
		got, err := parseMinor(tc.decimal, tc.exp)
		require.NoError(t, err)
		require.Equal(t, tc.minor, got, "parse %q with %d places", tc.decimal, tc.exp)
	}

	_, err := formatMinor(-1, 2)
	require.ErrorIs(t, err, errAmount, "negative")
	for _, bad := range []string{"", ".", "1.", ".50", "1.005", "-1.00", "+1.00", "1e3", "1,00", " 1.00", "1.0a",
		"92233720368547758.08", "0x10"} {
		_, err := parseMinor(bad, 2)
		require.ErrorIs(t, err, errAmount, "%q", bad)
	}

	value, err := formatAmount(49900, "RUB")
	require.NoError(t, err)
	require.Equal(t, "499.00", value)
	_, err = formatAmount(49900, "JPY")
	require.ErrorIs(t, err, errAmount, "a currency outside the table")
	_, err = parseAmount("499", "XXX")
	require.ErrorIs(t, err, errAmount)
}
