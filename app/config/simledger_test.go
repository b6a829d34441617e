package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// REBILL_SIM_LEDGER: postgres unless set; memory only for a dev node, as
// the in-process ledger is seen by that one node alone; any other value,
// and memory outside dev mode, stops the start naming the setting.
func TestSimLedger(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(name string) string { return env[name] })
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"Default", nil, config.SimLedgerPostgres},
		{"DevDefault", map[string]string{"REBILL_DEV": "1"}, config.SimLedgerPostgres},
		{"DevPostgres", map[string]string{"REBILL_DEV": "1", "REBILL_SIM_LEDGER": "postgres"}, config.SimLedgerPostgres},
		{"DevMemory", map[string]string{"REBILL_DEV": "1", "REBILL_SIM_LEDGER": "memory"}, config.SimLedgerMemory},
	} {
		cfg, err := load(tc.env)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, cfg.SimLedger, tc.name)
	}

	_, err := load(map[string]string{"REBILL_DEV": "1", "REBILL_SIM_LEDGER": "redis"})
	require.ErrorContains(t, err, `REBILL_SIM_LEDGER="redis": want postgres or memory`)

	_, err = load(map[string]string{"REBILL_SIM_LEDGER": "memory"})
	require.ErrorContains(t, err, "REBILL_SIM_LEDGER=memory: only a single dev node (REBILL_DEV=1)")
}
