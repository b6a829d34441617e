package yookassa

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// exponents are the currencies this adapter accepts, with the number of
// decimals of each (ISO 4217): YooKassa takes amounts as decimal strings
// in major units. A currency missing here is refused before any call
// rather than sent with a guessed scale.
var exponents = map[string]int{
	"RUB": 2,
	"USD": 2,
	"EUR": 2,
	"BYN": 2,
	"KZT": 2,
	"UZS": 2,
}

// errAmount: an amount that cannot be sent or was not understood.
var errAmount = errors.New("invalid amount")

// formatAmount writes minor units as YooKassa's decimal string: 49900 RUB
// is "499.00". Exact integer arithmetic: no float ever holds money.
func formatAmount(minor int64, currency string) (string, error) {
	exp, ok := exponents[currency]
	if !ok {
		return "", fmt.Errorf("%w: currency %q is not accepted", errAmount, currency)
	}
	return formatMinor(minor, exp)
}

func formatMinor(minor int64, exp int) (string, error) {
	if minor < 0 {
		return "", fmt.Errorf("%w: %d is negative", errAmount, minor)
	}
	digits := strconv.FormatInt(minor, 10)
	if exp == 0 {
		return digits, nil
	}
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	cut := len(digits) - exp
	return digits[:cut] + "." + digits[cut:], nil
}

// parseAmount reads YooKassa's decimal string back into minor units,
// refusing anything that is not exactly representable ("1.005" RUB).
func parseAmount(value, currency string) (int64, error) {
	exp, ok := exponents[currency]
	if !ok {
		return 0, fmt.Errorf("%w: currency %q is not accepted", errAmount, currency)
	}
	return parseMinor(value, exp)
}

func parseMinor(value string, exp int) (int64, error) {
	whole, frac, dotted := strings.Cut(value, ".")
	if whole == "" || !allDigits(whole) || !allDigits(frac) || (dotted && frac == "") || len(frac) > exp {
		return 0, fmt.Errorf("%w: %q is not a decimal with at most %d places", errAmount, value, exp)
	}
	frac += strings.Repeat("0", exp-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", errAmount, value, err)
	}
	return n, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
