package rebilltype

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/fault"
)

func TestValidCustomerID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"cus_1":                              true,
		"":                                   false,
		"   ":                                false, // looks empty in every list
		"cus\x001":                           false,
		"кириллица":                          false, // not printable ASCII
		strings.Repeat("a", MaxCustomerID):   true,
		strings.Repeat("a", MaxCustomerID+1): false,
	} {
		require.Equal(t, want, ValidCustomerID(s), "%q", s)
	}
}

// A payment method inside a larger request names its fields under the
// request's prefix; on its own (a card change) under none. Every fault is
// listed at once, as a 400 with the field list.
func TestPaymentMethodNamesEveryFaultUnderItsPrefix(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 0, 0, 0, 0, time.UTC)
	known := func(g string) bool { return g == "sim1" }
	bad := PaymentMethod{Gateway: "nope", Token: " ", Last4: "12a4", ExpMonth: 4, ExpYear: 2026}
	var errs Errors
	bad.Check(&errs, "payment_method.", now, known)
	fields := map[string]bool{}
	for _, fe := range errs {
		fields[fe.Field] = true
	}
	require.Equal(t, map[string]bool{"payment_method.gateway": true, "payment_method.token": true,
		"payment_method.last4": true, "payment_method.exp_year": true}, fields)

	err := bad.Validate(now, known)
	var list Errors
	require.True(t, errors.As(err, &list))
	require.Equal(t, "gateway", list[0].Field)
	require.Equal(t, fault.Invalid, fault.CodeOf(err))

	good := PaymentMethod{Gateway: "sim1", Token: "tok_ok", Last4: "4242", ExpMonth: 5, ExpYear: 2026}
	require.NoError(t, good.Validate(now, known))
	require.True(t, good.Expired(now.AddDate(0, 1, 0)))
}
