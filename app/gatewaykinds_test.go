package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/platform/clock"
)

// The file is checked against config.GatewayKinds and the clients are
// built here: every kind the check lets through has a builder, each gets
// its kind's hold lifetime, and a kind the check does not know is refused
// rather than built.
func TestEveryGatewayKindIsBuilt(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, config.GatewayKindNames(), keysOf(gatewayBuilders))
	var gateways []config.Gateway
	for _, kind := range config.GatewayKindNames() {
		secrets := map[string]string{}
		for _, c := range config.GatewayKinds[kind].Credentials {
			secrets[c] = "test-" + c
		}
		gateways = append(gateways, config.Gateway{Name: "gw-" + kind, Kind: kind, BaseURL: "http://127.0.0.1:1/" + kind,
			Priority: 1, CommissionBPS: map[string]int64{"*": 0}, Secrets: secrets})
	}
	built, err := buildGateways(gateways, time.Second, 0, clock.Wall{})
	require.NoError(t, err)
	require.Len(t, built, len(gateways))
	for i, b := range built {
		require.Equal(t, config.GatewayKinds[gateways[i].Kind].HoldLifetime, b.Settings.HoldLifetime, gateways[i].Kind)
		require.Equal(t, time.Second, b.Settings.Timeout)
	}

	_, err = buildGateways([]config.Gateway{{Name: "pp", Kind: "paypal"}}, time.Second, 0, clock.Wall{})
	require.ErrorContains(t, err, `gateway "pp": kind: "paypal" is not one of sim, stripe, yookassa`)
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
