package pgembed

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// dataDir returns a fresh data folder path whose parent the postgres user
// can traverse (t.TempDir makes mode-700 folders, which it could not when
// the tests run as root).
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgembed-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return filepath.Join(dir, "pg")
}

// start starts or attaches to the cluster in dir and stops it (if this call
// started it) when the test ends, removing its socket folder.
func start(t *testing.T, dir string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{DataDir: dir})
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(c.sockDir) })
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return c
}

func query[T any](t *testing.T, c *Cluster, sql string) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v T
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&v))
	return v
}

func TestStartStopReuse(t *testing.T) {
	dir := dataDir(t)
	ctx := context.Background()

	c := start(t, dir)
	require.True(t, c.started)
	require.Equal(t, 1, query[int](t, c, "SELECT 1"))
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Stop(ctx))
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err, "the socket still answers after Stop")

	c = start(t, dir)
	require.True(t, c.started)
	require.Equal(t, 42, query[int](t, c, "SELECT v FROM kept"))
}

// A run killed outright leaves a stale postmaster.pid; the next Start must
// start the server anyway, and keep the data.
func TestStartAfterKill(t *testing.T) {
	dir := dataDir(t)
	c := start(t, dir)
	require.Equal(t, 0, query[int](t, c, "SELECT count(*)::int FROM pg_class WHERE relname = 'kept'"))

	pidFile, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	// As the OOM killer would: the postmaster's children notice its death
	// and exit on their own.
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}, 10*time.Second, 50*time.Millisecond, "postmaster outlives SIGKILL")
	require.FileExists(t, filepath.Join(dir, "postmaster.pid"))

	c = start(t, dir)
	require.True(t, c.started)
	require.Equal(t, 1, query[int](t, c, "SELECT 1"))
}

func TestConcurrentStart(t *testing.T) {
	dir := dataDir(t)
	clusters := make([]*Cluster, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			clusters[i], errs[i] = Start(ctx, Options{DataDir: dir})
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if errors.Is(errs[i], ErrNoBinaries) {
			t.Skip(errs[i])
		}
		require.NoError(t, errs[i], "Start %d", i)
		t.Cleanup(func() { _ = os.Remove(c.sockDir) })
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	}

	a, b := clusters[0], clusters[1]
	require.NotEqual(t, a.started, b.started, "exactly one Start should start the server")
	require.Equal(t, a.URL("postgres"), b.URL("postgres"))
	const ident = "SELECT pg_postmaster_start_time()::text || ' ' || (SELECT system_identifier FROM pg_control_system())::text"
	require.Equal(t, query[string](t, a, ident), query[string](t, b, ident))
}

// As root, a data folder the postgres user cannot reach moves under the
// temporary folder, and Start says so.
func TestStartFallsBackWhenUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the server to another user")
	}
	closed, err := os.MkdirTemp("", "pgembed-closed-") // mode 700, owned by root
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(closed) })
	requested := filepath.Join(closed, "pg")
	fallback := filepath.Join(os.TempDir(), "rebill-pg-"+shortHash(requested))
	t.Cleanup(func() { _ = os.RemoveAll(fallback); _ = os.Remove(fallback + ".lock") })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var log strings.Builder
	c, err := Start(ctx, Options{DataDir: requested, Log: &log})
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(c.sockDir) })
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })

	require.Equal(t, fallback, c.dataDir)
	require.FileExists(t, filepath.Join(fallback, "PG_VERSION"))
	require.Contains(t, log.String(), "keeping the cluster in "+fallback)
	require.Equal(t, 1, query[int](t, c, "SELECT 1"))

	require.NoError(t, os.Chmod(closed, 0o755))
	got, err := chooseDataDir(requested, c.runAs)
	require.NoError(t, err)
	require.Equal(t, requested, got, "a reachable folder is used as asked")
}

// Stop stops a cluster that another Start started; Start's own Stop on an
// attached Cluster leaves it running.
func TestStopWhoeverStarted(t *testing.T) {
	dir := dataDir(t)
	owner := start(t, dir)
	require.True(t, owner.started)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	attached, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	require.False(t, attached.started)
	require.NoError(t, attached.Stop(ctx))
	require.Equal(t, 1, query[int](t, owner, "SELECT 1"), "an attached Cluster's Stop stopped the server")

	require.NoError(t, Stop(ctx, Options{DataDir: dir}))
	_, err = pgx.Connect(ctx, owner.URL("postgres"))
	require.Error(t, err, "the socket still answers after Stop")
	require.NoFileExists(t, filepath.Join(dir, "postmaster.pid"))
	require.NoError(t, Stop(ctx, Options{DataDir: dir}), "a stopped cluster counts as stopped")
}
