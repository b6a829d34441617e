package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/testkit/dbtest"
)

// lockedBuffer is a writer the command's goroutines and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A standalone simulator says on the line that starts it which ledger it
// writes, so one that silently shares a dev cluster's ledger is seen; the
// password of DATABASE_URL never reaches the log.
func TestGatewaysimStartLineNamesItsLedger(t *testing.T) {
	t.Parallel()
	dbURL, err := url.Parse(dbtest.URL(t))
	require.NoError(t, err)
	password, hasPassword := dbURL.User.Password()
	if !hasPassword {
		password = "never-logged-8f3a1c" // the test server trusts its user and ignores it
		dbURL.User = url.UserPassword(dbURL.User.Username(), password)
	}
	database := strings.TrimPrefix(dbURL.Path, "/")
	env := map[string]string{"DATABASE_URL": dbURL.String(), "REBILL_DATA_DIR": t.TempDir(), "REBILL_DB_MAX_CONNS": "8"}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"rebill", "gatewaysim", "--addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	var line string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `"gatewaysim listening"`) {
				line = l
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "no start line; stderr: %s", stderr.String())
	require.Contains(t, line, `"ledger":"schema gatewaysim of database `+database+` on `)
	require.NotContains(t, line, "ledger_cluster", "DATABASE_URL is set: no private cluster")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("gatewaysim did not stop")
	}
	require.NotContains(t, stderr.String(), password)
}

// Without any gateway there are no books to compare with: the audit
// refuses, naming the setting, before it opens the database, instead of
// reporting every capture missing at the gateway.
func TestAuditRefusesWithoutGateways(t *testing.T) {
	t.Parallel()
	env, dataDir := cliEnv(t, true)
	stdout, _, err := runCLI(t, env, "audit")
	require.ErrorContains(t, err, "no gateway configured")
	require.ErrorContains(t, err, "REBILL_GATEWAYS_FILE")
	require.Empty(t, stdout, "no report is printed")
	requireEmptyDir(t, dataDir)

	// The same database with the simulated gateways is audited.
	pool := dbtest.Pool(t)
	out, err := auditInProcess(t, pool)
	require.NoError(t, err)
	requireAuditCount(t, out, "discrepancies", 0)
}

// rebill registryfake serves the registry gateway's conformance fake with
// no database: a payment recorded as made at another bank is in its book,
// and it stops when its context ends.
func TestRegistryFakeServesStandalone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"rebill", "registryfake", "--addr", "127.0.0.1:0"}, func(string) string { return "" },
			&stdout, &stderr)
	}()
	var addr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(stderr.String(), "\n") {
			var line struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Message == "registryfake listening" {
				addr = line.Addr
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no start line; stderr: %s", stderr.String())
	res, err := http.Post("http://"+addr+"/outside", "application/json", strings.NewReader(`{"uin":"18800000000000000016","amount":500}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	res, err = http.Get("http://" + addr + "/quittances/18800000000000000016")
	require.NoError(t, err)
	var q struct {
		Payments []struct {
			Amount int64 `json:"amount"`
		} `json:"payments"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&q))
	res.Body.Close()
	require.Len(t, q.Payments, 1)
	require.EqualValues(t, 500, q.Payments[0].Amount)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("registryfake did not stop")
	}
}
