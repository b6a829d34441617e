package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/pgembed"
)

// helperEnv makes TestHelperEndsBadly run: this test binary re-executed
// by the tests below, to end a test the way a broken one would.
const helperEnv = "REBILL_DBTEST_HELPER"

func TestHelperEndsBadly(t *testing.T) {
	how := os.Getenv(helperEnv)
	if how == "" {
		t.Skip("run by TestCleanupDropsDatabaseOfBrokenTest")
	}
	u, err := url.Parse(URL(t))
	require.NoError(t, err)
	fmt.Printf("DATABASE=%s\n", strings.TrimPrefix(u.Path, "/"))
	switch how {
	case "fatal":
		t.Fatal("failing on purpose")
	case "panic":
		panic("panicking on purpose")
	}
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ServerURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

func TestCleanupDropsDatabaseOfBrokenTest(t *testing.T) {
	for _, how := range []string{"fatal", "panic"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEndsBadly$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+how)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the helper test should fail:\n%s", out)
			m := regexp.MustCompile(`DATABASE=(\S+)`).FindSubmatch(out)
			require.NotNil(t, m, "the helper printed no database name:\n%s", out)
			require.False(t, databaseExists(t, string(m[1])), "%s left behind by a test that ended with %s", m[1], how)
		})
	}
}

func TestDatabaseNames(t *testing.T) {
	now := time.Unix(1_764_547_200, 0)
	name := newDatabaseName(now)
	require.LessOrEqual(t, len(name), 63, name)
	require.Regexp(t, `^rebill_t_[0-9]+_[0-9]+_[0-9a-f]+_[0-9a-f]{6}$`, name)
	p, ok := parseDatabaseName(name)
	require.True(t, ok, name)
	require.Equal(t, now, p.created)
	require.Equal(t, os.Getpid(), p.pid)

	_, ok = parseDatabaseName("rebill_t_0123456789ab")
	require.False(t, ok, "names from before the creator was encoded")
}

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func TestStaleRules(t *testing.T) {
	if hostID == "" {
		t.Skip("no boot id or PID namespace to tell this machine by")
	}
	now := time.Now()
	named := func(created time.Time, pid int, host string) string {
		return fmt.Sprintf("rebill_t_%d_%d_%s_abcdef", created.Unix(), pid, host)
	}
	dead := deadPID(t)
	for _, tc := range []struct {
		name  string
		db    databaseInfo
		stale bool
	}{
		{"fresh, creator alive", databaseInfo{name: named(now, os.Getpid(), hostID)}, false},
		{"older than an hour", databaseInfo{name: named(now.Add(-2*time.Hour), os.Getpid(), hostID)}, true},
		{"older than an hour, but in use", databaseInfo{name: named(now.Add(-2*time.Hour), dead, hostID), connections: 1}, false},
		{"creator gone", databaseInfo{name: named(now, dead, hostID)}, true},
		{"creator on another machine", databaseInfo{name: named(now, dead, "0")}, false},
		{"old name, old folder", databaseInfo{name: "rebill_t_0123456789ab", created: now.Add(-2 * time.Hour)}, true},
		{"old name, new folder", databaseInfo{name: "rebill_t_0123456789ab", created: now.Add(-time.Minute)}, false},
		{"old name, age unknown", databaseInfo{name: "rebill_t_0123456789ab"}, false},
	} {
		require.Equal(t, tc.stale, staleDatabase(tc.db, now), tc.name)
	}

	const current = "rebill_tpl_aaaa"
	for _, tc := range []struct {
		name  string
		db    databaseInfo
		stale bool
	}{
		{"current, old", databaseInfo{name: current, created: now.Add(-48 * time.Hour)}, false},
		{"other checksum, two days", databaseInfo{name: "rebill_tpl_bbbb", created: now.Add(-48 * time.Hour)}, true},
		{"other checksum, an hour", databaseInfo{name: "rebill_tpl_bbbb", created: now.Add(-time.Hour)}, false},
		{"other checksum, in use", databaseInfo{name: "rebill_tpl_bbbb", created: now.Add(-48 * time.Hour), connections: 1}, false},
		{"other checksum, age unknown", databaseInfo{name: "rebill_tpl_bbbb"}, false},
		{"half built, two hours", databaseInfo{name: "rebill_tpl_bbbb_building", created: now.Add(-2 * time.Hour)}, true},
		{"current half built", databaseInfo{name: current + "_building", created: now.Add(-2 * time.Hour)}, false},
	} {
		require.Equal(t, tc.stale, staleTemplate(tc.db, current, now), tc.name)
	}
}

// The sweep drops what a killed run left and nothing a live one uses.
func TestSweepDropsLeftovers(t *testing.T) {
	if hostID == "" {
		t.Skip("no boot id or PID namespace to tell this machine by")
	}
	ctx := context.Background()
	admin := ServerURL(t)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)

	now := time.Now()
	suffix := randomSuffix(t)
	name := func(created time.Time, pid int, host, tag string) string {
		return fmt.Sprintf("rebill_t_%d_%d_%s_%s%s", created.Unix(), pid, host, tag, suffix)
	}
	var (
		old       = name(now.Add(-2*time.Hour), os.Getpid(), hostID, "a")
		orphan    = name(now, deadPID(t), hostID, "b")
		live      = name(now, os.Getpid(), hostID, "c")
		connected = name(now.Add(-2*time.Hour), os.Getpid(), hostID, "d")
		foreign   = name(now, deadPID(t), "0", "e")
	)
	for _, db := range []string{old, orphan, live, connected, foreign} {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+db)
		require.NoError(t, err)
		t.Cleanup(func() { _ = dropDatabase(admin, db) })
	}
	holder, err := pgx.Connect(ctx, withDatabase(admin, connected))
	require.NoError(t, err)
	defer holder.Close(ctx)

	// Another package's test process may sweep at the same moment and drop
	// the stale ones first: what counts is what is left.
	sweep(ctx, conn, "rebill_tpl_none", now, func(string, ...any) {})

	require.False(t, databaseExists(t, old), "older than an hour")
	require.False(t, databaseExists(t, orphan), "its creator is gone")
	require.True(t, databaseExists(t, live))
	require.True(t, databaseExists(t, connected), "somebody is connected")
	require.True(t, databaseExists(t, foreign), "a PID of another machine says nothing")
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	name := newDatabaseName(time.Now())
	return name[len(name)-5:]
}

// The private cluster keeps running while any test process uses it, and
// stops after the last one leaves.
func TestPrivateClusterStopsAfterLastUser(t *testing.T) {
	if testing.Short() {
		t.Skip("initialises a PostgreSQL cluster")
	}
	parent, err := os.MkdirTemp("", "dbtest-cluster-")
	require.NoError(t, err)
	// As root the server runs as postgres, which must reach the folder.
	require.NoError(t, os.Chmod(parent, 0o755))
	dataDir := filepath.Join(parent, "pg")
	t.Cleanup(func() {
		_ = pgembed.Stop(context.Background(), pgembed.Options{DataDir: dataDir})
		_ = os.RemoveAll(parent)
		// pgembed's socket folder (platform/pgembed socketDir), empty by now.
		sum := sha256.Sum256([]byte(dataDir))
		_ = os.Remove(filepath.Join(os.TempDir(), "rebill-pgsock-"+hex.EncodeToString(sum[:6])))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	url, release, err := usePrivateCluster(ctx, dataDir)
	if errors.Is(err, pgembed.ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	ping := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := pgconn.Connect(pctx, url)
		if err != nil {
			return err
		}
		return c.Close(pctx)
	}
	require.NoError(t, ping())

	// Another user comes and goes: this process still uses the cluster.
	other, otherRelease, err := usePrivateCluster(ctx, dataDir)
	require.NoError(t, err)
	require.Equal(t, url, other)
	otherRelease()
	time.Sleep(reaperGrace + time.Second)
	require.NoError(t, ping(), "the cluster stopped while a user was left")

	release()
	if !assert.Eventually(t, func() bool { return ping() != nil }, 30*time.Second, 100*time.Millisecond,
		"the cluster still runs after its last user left") {
		b, _ := os.ReadFile(dataDir + ".reaper.log")
		t.Fatalf("reaper log:\n%s", b)
	}
	// The server refuses connections as soon as it begins to shut down,
	// and removes its pid file when it has finished.
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dataDir, "postmaster.pid"))
		return os.IsNotExist(err)
	}, 30*time.Second, 100*time.Millisecond, "the cluster left its pid file behind")

	// A later run starts it again, and a new reaper stops it again.
	url, release, err = usePrivateCluster(ctx, dataDir)
	require.NoError(t, err)
	require.NoError(t, ping())
	release()
	require.Eventually(t, func() bool { return ping() != nil }, 30*time.Second, 100*time.Millisecond,
		"the restarted cluster was not stopped")
}

// Only a server that is not there, or refuses for good, sends the suite to
// the private cluster; one that answers "too many clients" is waited for.
func TestServerBusy(t *testing.T) {
	ctx := context.Background()
	_, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1")
	require.Error(t, err)
	require.False(t, serverBusy(err), "connection refused: %v", err)

	_, err = pgx.Connect(ctx, withDatabase(ServerURL(t), "rebill_no_such_database"))
	require.Error(t, err)
	require.False(t, serverBusy(err), "no such database: %v", err)

	for _, code := range []string{"53300", "57P03"} {
		require.True(t, serverBusy(fmt.Errorf("connect: %w", &pgconn.PgError{Code: code})), code)
	}
}
