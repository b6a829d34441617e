package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/rebill/rebill/platform/pgembed"
)

// The private cluster is shared by every test process of a run (go test
// runs one process per package, several at once), so no single process may
// stop it, and a package has no hook that runs when its process ends.
// Instead:
//
//   - each process that uses the cluster holds a shared flock on
//     <data>.users for its whole life; the kernel drops it when the process
//     exits, however it exits;
//   - the first of them spawns a reaper: the test binary itself, detached,
//     which waits for an exclusive lock on <data>.users (no user left),
//     waits reaperGrace more for the next package's process, and stops the
//     cluster while holding that lock, so a process arriving meanwhile
//     waits and then starts it again. <data>.reaper keeps it to one reaper.

// reaperEnv names the data folder a re-executed test binary reaps.
const reaperEnv = "REBILL_DBTEST_REAPER"

// reaperGrace is how long the cluster outlives its last user; go test
// starts the next package's process well within it.
const reaperGrace = 2 * time.Second

func init() {
	// A test binary started as the reaper does only that.
	if dataDir := os.Getenv(reaperEnv); dataDir != "" {
		if err := reap(dataDir); err != nil {
			fmt.Fprintln(os.Stderr, "dbtest reaper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// usePrivateCluster registers this process as a user of the cluster in
// dataDir, starts the cluster (or attaches to it), makes sure a reaper
// watches it, and returns the URL of its maintenance database. release
// unregisters this process (tests call it; a process that never does is
// unregistered when it exits).
func usePrivateCluster(ctx context.Context, dataDir string) (url string, release func(), err error) {
	users, err := lockFile(ctx, dataDir+".users", syscall.LOCK_SH)
	if err != nil {
		return "", nil, err
	}
	cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: dataDir})
	if err != nil {
		_ = users.Close()
		return "", nil, err
	}
	if err := ensureReaper(dataDir); err != nil {
		_ = users.Close()
		return "", nil, err
	}
	return cluster.URL("postgres"), func() { _ = users.Close() }, nil
}

// ensureReaper spawns a reaper unless one holds <data>.reaper.
func ensureReaper(dataDir string) error {
	guard, err := os.OpenFile(dataDir+".reaper", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open reaper lock: %w", err)
	}
	err = syscall.Flock(int(guard.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	_ = guard.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil // a reaper is watching
	}
	if err != nil {
		return fmt.Errorf("lock %s.reaper: %w", dataDir, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the test binary to run the reaper: %w", err)
	}
	log, err := os.OpenFile(dataDir+".reaper.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open reaper log: %w", err)
	}
	defer log.Close()
	// -test.run=^$ in case the binary is not a dbtest one after all.
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), reaperEnv+"="+dataDir)
	cmd.Dir = "/"
	// Not go test's output pipe (it would wait for the reaper to close it),
	// and a session of its own, so Ctrl-C on the run does not kill it too.
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the private cluster's reaper: %w", err)
	}
	return cmd.Process.Release()
}

// reap is the reaper's whole life: see the comment at the top of the file.
func reap(dataDir string) error {
	guard, err := os.OpenFile(dataDir+".reaper", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer guard.Close()
	if err := syscall.Flock(int(guard.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil // another reaper won
	}
	ctx := context.Background()
	for {
		users, err := lockFile(ctx, dataDir+".users", syscall.LOCK_EX)
		if err != nil {
			return err
		}
		_ = users.Close()
		time.Sleep(reaperGrace)
		users, err = lockFile(ctx, dataDir+".users", syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			continue // a new user came within the grace
		}
		if err != nil {
			return err
		}
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = pgembed.Stop(stopCtx, pgembed.Options{DataDir: dataDir})
		cancel()
		// The guard goes first: a user waiting on the users lock must find
		// no reaper, and spawn one for the cluster it starts again.
		_ = guard.Close()
		_ = users.Close()
		return err
	}
}

// lockFile opens path and flocks it with how (LOCK_SH or LOCK_EX, maybe
// with LOCK_NB: then EWOULDBLOCK comes back as is). Closing the file
// releases the lock.
func lockFile(ctx context.Context, path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, err
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ctx.Err() != nil {
			_ = f.Close()
			return nil, ctx.Err()
		}
	}
}
