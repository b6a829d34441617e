package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// Charge jobs are sized by Little's law from the target rate and the
// gateways' expected latency, unless REBILL_WORKERS says otherwise: a
// fixed count caps throughput at count / (2 × latency).
func TestWorkersFollowLittlesLaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int
	}{
		{"Defaults", nil, 1200}, // 1,000/s × 2 calls × 300 ms, doubled
		{"SlowGateways", map[string]string{"REBILL_GATEWAY_LATENCY": "800ms"}, 3200},
		{"LowerRate", map[string]string{"REBILL_TARGET_CHARGE_RATE": "100", "REBILL_GATEWAY_LATENCY": "250ms"}, 100},
		{"FastGateways", map[string]string{"REBILL_TARGET_CHARGE_RATE": "1", "REBILL_GATEWAY_LATENCY": "1ms"}, 1},
		{"SetByHand", map[string]string{"REBILL_WORKERS": "40", "REBILL_GATEWAY_LATENCY": "800ms"}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(func(name string) string { return tc.env[name] })
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Workers)
		})
	}
	require.Equal(t, 1000, config.LittlesLawWorkers(1000, 250*time.Millisecond))
}
