package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// flakyPostgres stands between a node and the test server. Its first
// `refuse` connections get the FATAL error a server sends to the clients
// it turns away (57P01 while it shuts down for a restart or a failover),
// the others are forwarded.
type flakyPostgres struct {
	addr     string
	accepted atomic.Int64
}

func startFlakyPostgres(t *testing.T, serverURL string, refuse int64, code, message string) *flakyPostgres {
	t.Helper()
	target, err := pgconn.ParseConfig(serverURL)
	require.NoError(t, err)
	network, address := "tcp", net.JoinHostPort(target.Host, strconv.Itoa(int(target.Port)))
	if strings.HasPrefix(target.Host, "/") {
		network, address = "unix", filepath.Join(target.Host, fmt.Sprintf(".s.PGSQL.%d", target.Port))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &flakyPostgres{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			n := p.accepted.Add(1)
			wg.Go(func() {
				defer client.Close()
				if n <= refuse {
					turnAway(client, code, message)
					return
				}
				server, err := net.Dial(network, address)
				if err != nil {
					return
				}
				defer server.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
				go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
				<-done
			})
		}
	})
	return p
}

// turnAway reads the client's startup message (declining TLS first if it
// asks) and answers it with a FATAL error, as PostgreSQL does.
func turnAway(conn net.Conn, code, message string) {
	backend := pgproto3.NewBackend(conn, conn)
	for {
		msg, err := backend.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.SSLRequest); ok {
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		break
	}
	backend.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: message})
	_ = backend.Flush()
}

// url is DATABASE_URL for database name of the test server through p.
func (p *flakyPostgres) url(t *testing.T, databaseURL string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(databaseURL)
	require.NoError(t, err)
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&connect_timeout=5", cfg.User, p.addr, cfg.Database)
}

// logLines are the JSON log lines of a node whose message contains msg.
func logLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(fmt.Sprint(entry["message"]), msg) {
			out = append(out, entry)
		}
	}
	return out
}

const retryLine = "start-up step failed on a transient database error"

// A node that starts while PostgreSQL turns connections away (a restart,
// a failover) waits it out: it logs each refused try and starts once the
// server accepts, instead of exiting for a supervisor to start it again.
func TestServeStartsOnceTheDatabaseAcceptsConnections(t *testing.T) {
	t.Parallel()
	const refused = 3
	proxy := startFlakyPostgres(t, dbtest.ServerURL(t), refused, "57P01", "terminating connection due to administrator command")
	env := productionEnv(map[string]string{
		"DATABASE_URL":             proxy.url(t, dbtest.URL(t)),
		"REBILL_ADDR":              "127.0.0.1:0",
		"REBILL_STARTUP_RETRY_FOR": "30s",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testsupport.LockedBuffer
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, []string{"rebill", "serve"}, env, io.Discard, &logs) }()

	var addr string
	require.Eventually(t, func() bool {
		if lines := logLines(t, logs.String(), "rebill listening"); len(lines) == 1 {
			addr = fmt.Sprint(lines[0]["addr"])
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned before listening: %v\n%s", err, logs.String())
		default:
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "the node never listened:\n%s", logs.String())
	resp, err := http.Get(addr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	tries := logLines(t, logs.String(), retryLine)
	require.Len(t, tries, refused, "one line per refused try:\n%s", logs.String())
	for i, line := range tries {
		require.Equal(t, "warn", line["level"])
		require.Equal(t, "connect to the database", line["step"])
		require.EqualValues(t, i+1, line["try"])
		require.Contains(t, line["error"], "SQLSTATE 57P01")
	}
	succeeded := logLines(t, logs.String(), "start-up step succeeded after transient database errors")
	require.Len(t, succeeded, 1)
	require.EqualValues(t, refused+1, succeeded[0]["tries"])

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// A database that stays away: the start gives up once
// REBILL_STARTUP_RETRY_FOR has passed (no try starts after it), saying
// what it tried, how often and for how long.
func TestServeGivesUpAfterTheStartupRetryBound(t *testing.T) {
	t.Parallel()
	proxy := startFlakyPostgres(t, dbtest.ServerURL(t), 1<<40, "57P01", "terminating connection due to administrator command")
	const bound = 1500 * time.Millisecond
	env := productionEnv(map[string]string{
		"DATABASE_URL":             proxy.url(t, dbtest.ServerURL(t)),
		"REBILL_ADDR":              "127.0.0.1:0",
		"REBILL_STARTUP_RETRY_FOR": bound.String(),
	})
	var logs testsupport.LockedBuffer
	started := time.Now()
	err := app.Run(context.Background(), []string{"rebill", "serve"}, env, io.Discard, &logs)
	elapsed := time.Since(started)
	require.Error(t, err)
	tries := proxy.accepted.Load()
	require.GreaterOrEqual(t, tries, int64(3), "backoff starts at a quarter second")
	require.Less(t, elapsed, bound+5*time.Second, "a try lasts milliseconds here: the bound was not honoured")
	require.ErrorContains(t, err, fmt.Sprintf("connect to the database: the database was still unavailable after %d tries in ", tries))
	require.ErrorContains(t, err, "(REBILL_STARTUP_RETRY_FOR=1.5s)")
	require.ErrorContains(t, err, "terminating connection due to administrator command (SQLSTATE 57P01)")
	require.Len(t, logLines(t, logs.String(), retryLine), int(tries)-1, "every try but the last is logged as retried")
	require.Empty(t, logLines(t, logs.String(), "rebill listening"))
}

// Errors that waiting cannot cure stop the start at the first try: a
// password the server refuses (28P01), a database that does not exist
// (3D000, from the real server).
func TestServeDoesNotRetryPermanentDatabaseErrors(t *testing.T) {
	t.Parallel()
	t.Run("authentication", func(t *testing.T) {
		t.Parallel()
		proxy := startFlakyPostgres(t, dbtest.ServerURL(t), 1<<40, "28P01", `password authentication failed for user "postgres"`)
		env := productionEnv(map[string]string{"DATABASE_URL": proxy.url(t, dbtest.ServerURL(t)), "REBILL_ADDR": "127.0.0.1:0"})
		var logs testsupport.LockedBuffer
		err := app.Run(context.Background(), []string{"rebill", "serve"}, env, io.Discard, &logs)
		require.ErrorContains(t, err, "connect to the database: ")
		require.ErrorContains(t, err, "SQLSTATE 28P01")
		require.NotContains(t, err.Error(), "still unavailable")
		require.EqualValues(t, 1, proxy.accepted.Load())
		require.Empty(t, logLines(t, logs.String(), retryLine))
	})
	t.Run("no such database", func(t *testing.T) {
		t.Parallel()
		cfg, err := pgconn.ParseConfig(dbtest.ServerURL(t))
		require.NoError(t, err)
		proxy := startFlakyPostgres(t, dbtest.ServerURL(t), 0, "", "")
		url := fmt.Sprintf("postgres://%s@%s/rebill_missing_%s?sslmode=disable", cfg.User, proxy.addr, strings.ReplaceAll(uuid.NewString(), "-", ""))
		env := productionEnv(map[string]string{"DATABASE_URL": url, "REBILL_ADDR": "127.0.0.1:0"})
		var logs testsupport.LockedBuffer
		err = app.Run(context.Background(), []string{"rebill", "serve"}, env, io.Discard, &logs)
		require.ErrorContains(t, err, "SQLSTATE 3D000")
		require.EqualValues(t, 1, proxy.accepted.Load())
		require.Empty(t, logLines(t, logs.String(), retryLine))
	})
}

// Build closes what it opened when a later step fails: in dev mode the
// dev clock's pool and the simulated gateways' pool (closed with their
// listener) were left open when the rescue-time check failed. Their
// connections carry the test pool's application_name, so once the test
// pool is closed too none may remain.
func TestBuildClosesWhatItOpenedWhenALaterStepFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		fail string
	}{
		{"rescue time too short", map[string]string{"REBILL_RESCUE_AFTER": "1s"}, "REBILL_RESCUE_AFTER (1s) must exceed"},
		{"built and closed", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			appName := "rebill-build-" + uuid.NewString()[:8]
			poolCfg, err := pgxpool.ParseConfig(dbtest.URL(t))
			require.NoError(t, err)
			poolCfg.MaxConns = 4
			poolCfg.ConnConfig.RuntimeParams["application_name"] = appName
			pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
			require.NoError(t, err)
			defer pool.Close()
			cfg, err := config.Load(testEnv(tc.env))
			require.NoError(t, err)

			svc, err := app.Build(context.Background(), cfg, pool, zerolog.Nop())
			if tc.fail != "" {
				require.ErrorContains(t, err, tc.fail)
				require.Nil(t, svc)
			} else {
				require.NoError(t, err)
				require.Positive(t, connectionsNamed(t, appName), "the dev pools hold connections while the node lives")
				svc.Close()
			}
			pool.Close()
			var left int
			require.Eventually(t, func() bool { left = connectionsNamed(t, appName); return left == 0 },
				10*time.Second, 20*time.Millisecond, "connections left open")
		})
	}
}

// connectionsNamed counts the test server's connections whose
// application_name is name.
func connectionsNamed(t *testing.T, name string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.ServerURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n))
	return n
}
