package e2e_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/testkit/proctest"
)

// auditInProcess runs `rebill audit` in dev mode over pool's database.
func auditInProcess(t *testing.T, pool *pgxpool.Pool, args ...string) (string, error) {
	t.Helper()
	env := testEnv(map[string]string{"DATABASE_URL": pool.Config().ConnString(), "REBILL_DATA_DIR": t.TempDir()})
	var out, errOut strings.Builder
	err := app.Run(context.Background(), append([]string{"rebill", "audit"}, args...), env, &out, &errOut)
	if err != nil {
		t.Logf("rebill audit stderr: %s", errOut.String())
	}
	return out.String(), err
}

// procAudit runs the built rebill binary's audit with env, as an operator
// would, and returns its exit code and output.
func procAudit(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(procBinary(t), append([]string{"audit"}, args...)...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REBILL_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if _, set := env["REBILL_GATEWAY_TIMEOUT"]; !set {
		// The audit lists a whole day of operations per gateway: on a
		// loaded machine that takes longer than dev mode's 2 s per call,
		// and a timed-out listing would read as missing captures.
		cmd.Env = append(cmd.Env, "REBILL_GATEWAY_TIMEOUT=30s")
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if code != 0 {
		t.Logf("rebill audit exited %d; stderr: %s", code, proctest.Tail(stderr.String(), 4096))
	}
	return code, stdout.String()
}

// requireAuditCount checks one count line of the audit's text output.
func requireAuditCount(t *testing.T, out, name string, n int) {
	t.Helper()
	require.Regexp(t, regexp.MustCompile(`(?m)^`+name+`\s+`+strconv.Itoa(n)+`$`), out)
}

// auditReport is the JSON of `rebill audit --json`.
type auditReport struct {
	Periods       int `json:"periods"`
	Captured      int `json:"captured"`
	Discrepancies []struct {
		Kind      string `json:"kind"`
		ChargeKey string `json:"charge_key"`
	} `json:"discrepancies"`
}
