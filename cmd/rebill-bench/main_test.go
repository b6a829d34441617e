package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --help prints the usage and does nothing else: the benchmark creates and
// drops a database, which a reader of its flags did not ask for. The
// database URL names a port nobody listens on, so a run that went further
// would fail.
func TestHelpDoesNothingElse(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := map[string]string{"REBILL_DATA_DIR": dataDir, "DATABASE_URL": "postgres://postgres@127.0.0.1:1/rebill?connect_timeout=1"}
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"--help"}, func(k string) string { return env[k] }, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "Usage: rebill-bench")
	require.Contains(t, out.String(), "-nodes")
	entries, err := os.ReadDir(dataDir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
