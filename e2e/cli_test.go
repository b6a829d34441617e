package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
)

// cliEnv points the database at a port nobody listens on and the private
// cluster at an empty folder: a command that touched either fails or
// leaves something there.
func cliEnv(t *testing.T, withDatabaseURL bool) (func(string) string, string) {
	t.Helper()
	dataDir := t.TempDir()
	env := map[string]string{"REBILL_DATA_DIR": dataDir}
	if withDatabaseURL {
		env["DATABASE_URL"] = "postgres://postgres@" + strings.TrimPrefix(closedPortURL(t), "http://") + "/rebill?connect_timeout=1"
	}
	return func(k string) string { return env[k] }, dataDir
}

func runCLI(t *testing.T, env func(string) string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	err = app.Run(context.Background(), append([]string{"rebill"}, args...), env, &out, &errOut)
	return out.String(), errOut.String(), err
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "something was created in %s: a private cluster was started", dir)
}

// --help on any command prints its usage on stdout and does nothing else:
// a command that ran on --help would start the private cluster or migrate
// a database the user only wanted to read about.
func TestHelpOnEveryCommandDoesNothingElse(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--help"}, {"serve", "-h"},
		{"migrate", "--help"}, {"migrate", "-h"},
		{"apikey", "--help"}, {"apikey", "create", "--help"}, {"apikey", "create", "--role", "admin", "-h"},
		{"gatewaysim", "--help"},
		{"registryfake", "--help"},
		{"zhkhfake", "--help"},
		{"audit", "--help"},
		{"secrets", "--help"}, {"secrets", "rotate", "--help"},
		{"version", "--help"},
		{"--help"}, {"help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			for _, withURL := range []bool{false, true} {
				env, dataDir := cliEnv(t, withURL)
				stdout, _, err := runCLI(t, env, args...)
				require.NoError(t, err)
				require.Contains(t, stdout, "Usage:")
				requireEmptyDir(t, dataDir)
			}
		})
	}
}

func TestServeHelpDocumentsGateways(t *testing.T) {
	t.Parallel()
	env, _ := cliEnv(t, false)
	stdout, _, err := runCLI(t, env, "serve", "--help")
	require.NoError(t, err)
	for _, want := range []string{"REBILL_DB_MAX_CONNS", "REBILL_GATEWAYS", "sim1=http://127.0.0.1:8090/sim1", "/health", "404"} {
		require.Contains(t, stdout, want)
	}
}

func TestCLIRefusesBadArguments(t *testing.T) {
	t.Parallel()
	env, dataDir := cliEnv(t, true)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apikey", "create"}, "--role is required"},
		{[]string{"apikey", "create", "--customer", "cust-1"}, "--role is required"},
		{[]string{"apikey", "create", "--role", "boss"}, `unknown role "boss"`},
		{[]string{"apikey"}, "want the subcommand create"},
		{[]string{"migrate", "now"}, `unexpected argument "now"`},
		{[]string{"serve", "--port", "1"}, "flag provided but not defined: -port"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"audit", "--from", "yesterday"}, `--from "yesterday": want a day as YYYY-MM-DD`},
	} {
		_, _, err := runCLI(t, env, tc.args...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	requireEmptyDir(t, dataDir)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	env, _ := cliEnv(t, true)
	stdout, _, err := runCLI(t, env, "version")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^rebill \S+\n`, stdout)
	require.Regexp(t, `(?m)^commit \S+`, stdout)
	require.Regexp(t, `(?m)^go go1\.`, stdout)
}

// The exit codes an operator's shell sees.
func TestCLIExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the rebill binary")
	}
	bin := procBinary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"migrate", "--help"}, 0, "Usage: rebill migrate"},
		{[]string{"apikey", "create", "-h"}, 0, "Usage: rebill apikey create"},
		{[]string{"version"}, 0, "commit "},
		{[]string{"apikey", "create"}, 1, "rebill: apikey create: --role is required"},
		{[]string{"audit"}, 1, "rebill: audit: no gateway configured"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Dir = t.TempDir()
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=postgres://postgres@127.0.0.1:1/none?connect_timeout=1"}
		out, err := cmd.CombinedOutput()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, tc.code, code, "%v: %s", tc.args, out)
		require.Contains(t, string(out), tc.want, "%v", tc.args)
	}
}

// serve refuses a configuration it cannot run before it touches the
// database: without an encryption key outside dev mode the refusal names
// the key, not the database nobody listens on (no migration ran, no first
// admin key was printed), and nothing was created in the data folder.
func TestServeRefusesABadConfigurationBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	env, dataDir := cliEnv(t, true)
	file := filepath.Join(t.TempDir(), "registries.yaml")
	require.NoError(t, os.WriteFile(file, []byte("- {name: bank, kind: http, base_url: \"http://127.0.0.1:1\"}\n"), 0o600))
	more := map[string]string{"REBILL_REGISTRY_FILE": file, "REBILL_GATEWAYS": "sim1=http://127.0.0.1:1/sim1"}
	stdout, _, err := runCLI(t, func(k string) string {
		if v, ok := more[k]; ok {
			return v
		}
		return env(k)
	}, "serve")
	require.ErrorContains(t, err, "REBILL_ENCRYPTION_KEY is required")
	require.NotContains(t, stdout, "REBILL_KEY", "no admin key printed")
	requireEmptyDir(t, dataDir)
}
