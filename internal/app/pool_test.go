package app

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/config"
)

// One node, River's LISTEN connection and the in-process simulator
// included, stays within REBILL_DB_MAX_CONNS (default 25).
func TestPoolSizesFitTheBudget(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want [3]int32 // service, sim, dev clock
	}{
		{map[string]string{}, [3]int32{24, 0, 0}},
		{map[string]string{"REBILL_DEV": "1"}, [3]int32{17, 5, 2}},
		{map[string]string{"REBILL_DEV": "1", "REBILL_DB_MAX_CONNS": "10"}, [3]int32{5, 2, 2}},
		{map[string]string{"REBILL_DEV": "1", "REBILL_DB_MAX_CONNS": "8"}, [3]int32{3, 2, 2}},
		{map[string]string{"REBILL_DB_MAX_CONNS": "100"}, [3]int32{99, 0, 0}},
	} {
		cfg, err := config.Load(func(k string) string { return tc.env[k] })
		require.NoError(t, err)
		service, sim, devClock := poolSizes(cfg)
		require.Equal(t, tc.want, [3]int32{service, sim, devClock}, "%v", tc.env)
		require.Equal(t, cfg.DBMaxConns, int(service+sim+devClock+1), "River's LISTEN connection makes the total: %v", tc.env)
	}
	_, err := config.Load(func(k string) string { return map[string]string{"REBILL_DB_MAX_CONNS": "7"}[k] })
	require.ErrorContains(t, err, "REBILL_DB_MAX_CONNS")
}

func TestVersionText(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/rebill/rebill", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "false"}}}
	require.Equal(t, "rebill v1.4.0\nmodule github.com/rebill/rebill\ncommit 0123abcd\ncommit time 2026-12-01T00:00:00Z\ngo go1.26.8\n", versionText(info))

	info.Settings[2].Value = "true"
	require.Contains(t, versionText(info), "commit 0123abcd (modified: built with uncommitted changes)\n")

	info.Main.Version, info.Settings = "", nil
	text := versionText(info)
	require.Contains(t, text, "rebill (devel)\n")
	require.Contains(t, text, "commit unknown")
	require.Contains(t, versionText(nil), "no build information")
}
