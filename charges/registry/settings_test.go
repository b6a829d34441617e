package registry_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
)

// A uip is 32 digits: "1", the BIK, the branch padded to 6, the Moscow day
// given (DDMMYYYY, the charge's own) and an 8-digit number; the same
// posting gets the same one, another attempt or amount another.
func TestUIPIsWellFormedAndPerAttemptAndAmount(t *testing.T) {
	t.Parallel()
	ids := registry.PaymentIDs{Format: registry.PaymentIDUIP, BIK: "044525225", Branch: "17"}
	// 22:30 UTC on the 31st is already the 1st of April in Moscow.
	at := time.Date(2027, 3, 31, 22, 30, 0, 0, time.UTC)
	id := ids.ID("enr:18810142200817004923", 1, 50000, at, 0)
	require.Regexp(t, regexp.MustCompile(`^1`+`044525225`+`000017`+`01042027`+`\d{8}$`), id)
	require.Equal(t, id, ids.ID("enr:18810142200817004923", 1, 50000, at, 0), "a retry is a replay")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 2, 50000, at, 0), "a new attempt is a new payment")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 1, 100000, at, 0), "a new amount is a new payment")
	require.NotEqual(t, id, ids.ID("enr:18810142200817004923", 1, 50000, at, 1), "another try is another identifier")
	noBranch := registry.PaymentIDs{Format: registry.PaymentIDUIP, BIK: "044525225"}.ID("k", 1, 1, at, 0)
	require.Equal(t, "1044525225000000", noBranch[:16])
}

// The zero PaymentIDs is the hex form the simulated registry has always
// been given.
func TestZeroPaymentIDsIsHex(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 3, 20, 9, 0, 0, 0, time.UTC)
	require.Equal(t, registry.PaymentID("enr:1", 1, 500), registry.PaymentIDs{}.ID("enr:1", 1, 500, at, 0))
	other := registry.PaymentIDs{}.ID("enr:1", 1, 500, at, 1)
	require.Len(t, other, 32)
	require.NotEqual(t, registry.PaymentID("enr:1", 1, 500), other)
}

// Gateways with priorities are tried lower first, taking turns among
// equals; a degraded one goes after every healthy one whatever its
// priority.
func TestBalancerTriesByPriorityInTurnAmongEquals(t *testing.T) {
	t.Parallel()
	a, b, c := registrytest.NewFake(t, "a"), registrytest.NewFake(t, "b"), registrytest.NewFake(t, "c")
	for _, g := range []*registrytest.Fake{a, b, c} {
		g.PostFunc = registrytest.Posts(nil)
	}
	bal := registry.NewBalancer([]registry.Gateway{
		registry.WithSettings(c, registry.Settings{Priority: 2}),
		registry.WithSettings(a, registry.Settings{Priority: 1}),
		registry.WithSettings(b, registry.Settings{Priority: 1}),
	}, time.Second)
	for i := 0; i < 6; i++ {
		used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.NoError(t, err)
		require.Contains(t, []string{"a", "b"}, used)
	}
	require.Len(t, a.CallsOf("post"), 3, "equals take turns")
	require.Len(t, b.CallsOf("post"), 3)
	require.Empty(t, c.CallsOf("post"), "a lower priority is not tried while a higher answers")

	a.PostFunc, b.PostFunc = registrytest.Posts(registry.ErrUnavailable), registrytest.Posts(registry.ErrUnavailable)
	used, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.NoError(t, err)
	require.Equal(t, "c", used, "the next priority takes over")
	used, err = bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.NoError(t, err)
	require.Equal(t, "c", used, "degraded gateways go last")
}

// A gateway's own timeout bounds its calls instead of the balancer's; past
// it the outcome is unknown.
func TestGatewayTimeoutOverridesTheBalancers(t *testing.T) {
	t.Parallel()
	g := registrytest.NewFake(t, "slow")
	g.PostFunc = func(ctx context.Context, _ registry.Payment) error {
		<-ctx.Done()
		return ctx.Err()
	}
	bal := registry.NewBalancer([]registry.Gateway{registry.WithSettings(g, registry.Settings{Timeout: 20 * time.Millisecond})}, time.Hour)
	_, err := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
	require.ErrorIs(t, err, registry.ErrUnknownOutcome)
}

// A pending answer is an unknown outcome whose gateway stays healthy.
func TestPendingIsAnUnknownOutcomeOfAHealthyGateway(t *testing.T) {
	t.Parallel()
	err := error(&registry.PendingError{Gateway: "a", RetryAfter: time.Minute})
	require.True(t, errors.Is(err, registry.ErrUnknownOutcome))
	pe, ok := registry.Pending(fmtWrap(err))
	require.True(t, ok)
	require.Equal(t, time.Minute, pe.RetryAfter)

	a, b := registrytest.NewFake(t, "a"), registrytest.NewFake(t, "b")
	a.PostFunc, b.PostFunc = registrytest.Posts(err), registrytest.Posts(nil)
	bal := registry.NewBalancer([]registry.Gateway{registry.WithSettings(a, registry.Settings{Priority: 1}),
		registry.WithSettings(b, registry.Settings{Priority: 2})}, time.Second)
	for i := 0; i < 2; i++ {
		used, perr := bal.Post(context.Background(), registry.Payment{PaymentID: "p"})
		require.Equal(t, "a", used, "not moved off")
		_, ok := registry.Pending(perr)
		require.True(t, ok)
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }
