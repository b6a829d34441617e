package app

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
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
	require.Equal(t, "rebill v1.4.0\nmodule github.com/rebill/rebill\ncommit 0123abcd\ncommit time 2026-12-01T00:00:00Z\ngo go1.26.8\n", versionText(info, ""))

	info.Settings[2].Value = "true"
	require.Contains(t, versionText(info, ""), "commit 0123abcd (modified: built with uncommitted changes)\n")

	info.Main.Version, info.Settings = "", nil
	text := versionText(info, "")
	require.Contains(t, text, "rebill (devel)\n")
	require.Contains(t, text, "commit unknown")
	require.Contains(t, text, "see docs/operating.md")

	// A commit given with -ldflags -X wins over VCS stamping, which a
	// worktree or a build context without .git lacks.
	require.Contains(t, versionText(info, "fedcba98"), "commit fedcba98 (set at link time)\n")
	info.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}}
	require.Contains(t, versionText(info, "fedcba98"), "commit fedcba98 (set at link time)\n")
	require.Contains(t, versionText(nil, ""), "no build information")
}

// Without DATABASE_URL a standalone simulator's ledger is the private
// cluster's, shared with the dev nodes of the same folder: its log says so
// and names no password.
func TestLedgerLoggerNamesThePrivateCluster(t *testing.T) {
	poolCfg, err := pgxpool.ParseConfig("postgres://postgres:pw-not-logged@127.0.0.1:1/rebill?connect_timeout=1")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg) // lazy: never connects here
	require.NoError(t, err)
	defer pool.Close()
	dataDir := t.TempDir()
	var buf bytes.Buffer
	log := ledgerLogger(zerolog.New(&buf), config.Config{DataDir: dataDir}, pool)
	log.Info().Msg("gatewaysim listening")
	line := buf.String()
	require.Contains(t, line, `"ledger":"schema gatewaysim of database rebill on 127.0.0.1:1, user postgres"`)
	require.Contains(t, line, `"ledger_cluster":"`+filepath.Join(dataDir, "pg")+`"`)
	require.Contains(t, line, "dev nodes whose REBILL_DATA_DIR is "+dataDir)
	require.NotContains(t, line, "pw-not-logged")
}

// Opening either pool with a connection string the driver cannot parse
// (Load refuses these; a caller that skipped it must not leak either)
// names the setting and the problem, never the string or its password.
func TestOpeningPoolsNeverPrintsTheConnectionString(t *testing.T) {
	t.Parallel()
	const secret = "S3cret-pw"
	for _, url := range []string{
		"host=127.0.0.1 user=rebill password = " + secret + " pool_max_conns=many",
		"host=127.0.0.1 user=rebill password =" + secret + " statement_cache_capacity=x",
		"password = '" + secret + " x' host=127.0.0.1 default_query_exec_mode=bogus",
		"postgres://rebill:" + secret + "@127.0.0.1/rebill?pool_min_conns=x",
	} {
		_, err := openReplica(t.Context(), url)
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
		require.Contains(t, err.Error(), "REBILL_REPLICA_URL: cannot be parsed")
		_, _, err = openPool(t.Context(), config.Config{DatabaseURL: url}, zerolog.Nop())
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
		require.Contains(t, err.Error(), "DATABASE_URL: cannot be parsed")
	}
}
