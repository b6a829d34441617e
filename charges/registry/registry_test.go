package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
)

func TestPaymentIDIsPerAttemptAndAmount(t *testing.T) {
	t.Parallel()
	id := registry.PaymentID("enr:18800000000000000008", 1, 50000)
	require.Equal(t, id, registry.PaymentID("enr:18800000000000000008", 1, 50000), "a retry is a replay")
	require.NotEqual(t, id, registry.PaymentID("enr:18800000000000000008", 2, 50000), "a new attempt is a new payment")
	require.NotEqual(t, id, registry.PaymentID("enr:18800000000000000008", 1, 100000), "a new amount is a new payment")
	require.Len(t, id, 32)
}

func TestBalancerSpreadsAndMovesOffADegradedGateway(t *testing.T) {
	t.Parallel()
	a, b := registrytest.NewFake(t, "gmp1"), registrytest.NewFake(t, "gmp2")
	a.PostFunc, b.PostFunc = registrytest.Posts(nil), registrytest.Posts(nil)
	bal := registry.NewBalancer([]registry.Gateway{a, b}, time.Second)
	for i := 0; i < 4; i++ {
		_, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.NoError(t, err)
	}
	require.Len(t, a.CallsOf("post"), 2, "calls alternate")
	require.Len(t, b.CallsOf("post"), 2)

	a.PostFunc = registrytest.Posts(registry.ErrUnavailable)
	for i := 0; i < 4; i++ {
		used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.NoError(t, err)
		require.Equal(t, "gmp2", used)
	}
	require.Len(t, a.CallsOf("post"), 3, "the degraded gateway is skipped once it failed")

	b.PostFunc = registrytest.Posts(registry.ErrUnavailable)
	_, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.True(t, errors.Is(err, registry.ErrUnavailable), "none would: %v", err)

	b.PostFunc = registrytest.Posts(nil)
	used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.NoError(t, err, "when every gateway is degraded, each is still tried")
	require.Equal(t, "gmp2", used)
}
