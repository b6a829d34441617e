package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/registry"
)

func TestPaymentIDIsPerAttemptAndAmount(t *testing.T) {
	t.Parallel()
	id := registry.PaymentID("enr:18800000000000000008", 1, 50000)
	require.Equal(t, id, registry.PaymentID("enr:18800000000000000008", 1, 50000), "a retry is a replay")
	require.NotEqual(t, id, registry.PaymentID("enr:18800000000000000008", 2, 50000), "a new attempt is a new payment")
	require.NotEqual(t, id, registry.PaymentID("enr:18800000000000000008", 1, 100000), "a new amount is a new payment")
	require.Len(t, id, 32)
}

// fakeGateway answers every call with err and counts calls.
type fakeGateway struct {
	name  string
	err   error
	calls int
	// known is what a look-up answers: the registry has the payment.
	known   bool
	lookups int
}

func (g *fakeGateway) Name() string { return g.name }
func (g *fakeGateway) Post(context.Context, registry.Payment) error {
	g.calls++
	return g.err
}
func (g *fakeGateway) Annul(context.Context, string) error { g.calls++; return g.err }
func (g *fakeGateway) Lookup(context.Context, string) (bool, bool, error) {
	g.lookups++
	return g.known, false, g.err
}

func TestBalancerSpreadsAndMovesOffADegradedGateway(t *testing.T) {
	t.Parallel()
	a, b := &fakeGateway{name: "gmp1"}, &fakeGateway{name: "gmp2"}
	bal := registry.NewBalancer([]registry.Gateway{a, b}, time.Second)
	for i := 0; i < 4; i++ {
		_, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.NoError(t, err)
	}
	require.Equal(t, 2, a.calls, "calls alternate")
	require.Equal(t, 2, b.calls)

	a.err = registry.ErrUnavailable
	for i := 0; i < 4; i++ {
		used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.NoError(t, err)
		require.Equal(t, "gmp2", used)
	}
	require.Equal(t, 3, a.calls, "the degraded gateway is skipped once it failed")

	b.err = registry.ErrUnavailable
	_, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.True(t, errors.Is(err, registry.ErrUnavailable), "none would: %v", err)

	b.err = nil
	used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.NoError(t, err, "when every gateway is degraded, each is still tried")
	require.Equal(t, "gmp2", used)
}
