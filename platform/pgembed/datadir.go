package pgembed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// serverAccount picks who runs the server: PostgreSQL refuses to run as
// root, so a root process hands it to the `postgres` system user.
func serverAccount() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, but there is no `postgres` user to run it as (create one, e.g. `useradd --system postgres`, or set DATABASE_URL): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of user postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of user postgres: %w", err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	groups, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("list groups of user postgres: %w", err)
	}
	for _, g := range groups {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

// chooseDataDir returns requested, unless the server account cannot reach
// it (e.g. it lies under /root, mode 700): then a folder under the system
// temporary folder, named after requested so each request keeps its own.
func chooseDataDir(requested string, runAs *syscall.Credential) (string, error) {
	if runAs == nil || reachable(filepath.Dir(requested), runAs) {
		return requested, nil
	}
	if !reachable(os.TempDir(), runAs) {
		return "", fmt.Errorf("the postgres user can reach neither %s nor %s; choose a data folder it can reach", requested, os.TempDir())
	}
	return filepath.Join(os.TempDir(), "rebill-pg-"+shortHash(requested)), nil
}

// reachable tells whether account can search (traverse) dir and every
// folder above it, judging by owner, group and permission bits.
func reachable(dir string, account *syscall.Credential) bool {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || !canSearch(fi, account) {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

func canSearch(fi fs.FileInfo, account *syscall.Credential) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == account.Uid:
		return perm&0o100 != 0
	case st.Gid == account.Gid || slices.Contains(account.Groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// socketDir is a short private folder for the server's socket: Unix socket
// paths are limited to about 107 bytes, which a data folder path may exceed.
func socketDir(dataDir string) string {
	base := os.TempDir()
	if len(base) > 64 {
		base = "/tmp"
	}
	return filepath.Join(base, "rebill-pgsock-"+shortHash(dataDir))
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// lockDataDir takes an exclusive flock on a file beside dataDir, so that
// processes starting together initialise and start the server only once.
// The returned function releases it.
func lockDataDir(ctx context.Context, dataDir string) (func(), error) {
	path := dataDir + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// ownedDir creates dir (mode 700) if needed and makes sure the server
// account owns it, handing it over when this process is root.
func (c *Cluster) ownedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	if c.runAs == nil {
		if owner != uint32(os.Getuid()) {
			return fmt.Errorf("%s belongs to uid %d, not to this user", dir, owner)
		}
		return nil
	}
	if owner == c.runAs.Uid {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(c.runAs.Uid), int(c.runAs.Gid)); err != nil {
			return fmt.Errorf("hand %s to the postgres user: %w", path, err)
		}
		return nil
	})
}
