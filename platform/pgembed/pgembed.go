// Package pgembed runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries, so that `rebill serve` works with no DATABASE_URL.
//
// The cluster listens only on a Unix socket in a private folder (no TCP port
// to collide with or expose) and trusts local connections. Several processes
// may call Start on the same data folder at once: a lock file beside the
// folder serialises them, the first one initialises and starts the server and
// the others attach to it.
package pgembed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (install PostgreSQL, e.g. `apt-get install postgresql`, or set DATABASE_URL)")

const (
	// port only names the socket file (.s.PGSQL.<port>); the socket folder is
	// private to the data folder, so the default never collides.
	port = 5432
	// readyTimeout bounds the wait for the server to accept connections.
	readyTimeout = 30 * time.Second
	// logName is postgres' own log, kept in the data folder.
	logName = "postgres.log"
)

// Options configures a private cluster.
type Options struct {
	// DataDir holds the cluster; it is created on first use and reused after.
	DataDir string
	// Log receives one line for each step Start takes (initialising,
	// starting, attaching, moving the data folder somewhere the server can
	// reach), so an operator can tell where the data lives. A zerolog.Logger
	// fits. Nil discards them. PostgreSQL's own log goes to postgres.log in
	// the data folder.
	Log io.Writer
	// Settings are extra server settings ("name=value") for a server this
	// call starts, e.g. shared_preload_libraries=pg_stat_statements for a
	// benchmark that counts statements. A server already running keeps its
	// own.
	Settings []string
}

// Cluster is a running private PostgreSQL server.
type Cluster struct {
	bin     binaries
	dataDir string
	sockDir string
	// runAs is the account the server runs as when this process is root
	// (PostgreSQL refuses root); nil means this process' own user.
	runAs *syscall.Credential
	// started tells whether this process started the server, and so owns
	// stopping it.
	started  bool
	settings []string
}

// Start initialises (first time) and starts the cluster, or attaches to it
// when another process already runs it from the same DataDir.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "pgembed: "+format+"\n", args...)
		}
	}
	c, err := locate(ctx, opts, logf)
	if err != nil {
		return nil, err
	}
	c.settings = opts.Settings
	unlock, err := lockDataDir(ctx, c.dataDir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if err := c.prepare(ctx, logf); err != nil {
		return nil, err
	}
	if c.running(ctx) {
		logf("using the PostgreSQL server already running from %s", c.dataDir)
	} else {
		if err := c.start(ctx); err != nil {
			return nil, err
		}
		c.started = true
		logf("started PostgreSQL from %s on socket folder %s", c.dataDir, c.sockDir)
	}
	if err := c.waitReady(ctx); err != nil {
		if c.started {
			// Leave no unusable server behind; the error above says why.
			_ = c.stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return c, nil
}

// locate finds the binaries, the server account and the data folder Start
// uses for opts, without touching the cluster.
func locate(ctx context.Context, opts Options, logf func(string, ...any)) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("start private PostgreSQL: Options.DataDir is empty")
	}
	bin, err := findBinaries(ctx)
	if err != nil {
		return nil, err
	}
	runAs, err := serverAccount()
	if err != nil {
		return nil, err
	}
	requested, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("resolve PostgreSQL data folder %q: %w", opts.DataDir, err)
	}
	if err := os.MkdirAll(filepath.Dir(requested), 0o755); err != nil {
		return nil, fmt.Errorf("create parent of PostgreSQL data folder: %w", err)
	}
	dataDir, err := chooseDataDir(requested, runAs)
	if err != nil {
		return nil, err
	}
	if dataDir != requested {
		logf("%s is not reachable by the postgres user (a parent folder is closed to it); keeping the cluster in %s instead", requested, dataDir)
	}
	return &Cluster{bin: bin, dataDir: dataDir, sockDir: socketDir(dataDir), runAs: runAs}, nil
}

// Stop shuts down the cluster of opts.DataDir whichever process started
// it; one that is not running counts as stopped. It is for a process that
// outlives every user of a shared cluster (the test suite's reaper): a
// process that merely attached must not stop a server others still use.
func Stop(ctx context.Context, opts Options) error {
	c, err := locate(ctx, opts, func(string, ...any) {})
	if err != nil {
		return err
	}
	unlock, err := lockDataDir(ctx, c.dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	if !c.running(ctx) {
		return nil
	}
	return c.stop(ctx)
}

// DataDir is where the cluster lives: the folder asked for, or the one
// used instead when the server's account cannot reach it.
func (c *Cluster) DataDir() string { return c.dataDir }

// URL is a connection string for database dbname on the cluster's socket.
func (c *Cluster) URL(dbname string) string {
	q := url.Values{}
	q.Set("host", c.sockDir)
	// Explicit, so a PGPORT in the environment cannot point pgx elsewhere.
	q.Set("port", strconv.Itoa(port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// Stop shuts the cluster down if this process started it; a server found
// already gone counts as stopped.
func (c *Cluster) Stop(ctx context.Context) error {
	if !c.started {
		return nil
	}
	// Holding the lock keeps another process from attaching to a server
	// that is shutting down.
	unlock, err := lockDataDir(ctx, c.dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	return c.stop(ctx)
}

// stop runs pg_ctl stop; the caller holds the data folder lock.
func (c *Cluster) stop(ctx context.Context) error {
	if out, err := c.run(ctx, c.bin.pgCtl, "stop", "-D", c.dataDir, "-m", "fast", "-w"); err != nil {
		// A server that died on its own (killed, crashed) is stopped too;
		// pg_ctl status exits with 3 when no server runs.
		var exit *exec.ExitError
		if _, statusErr := c.run(ctx, c.bin.pgCtl, "status", "-D", c.dataDir); !errors.As(statusErr, &exit) || exit.ExitCode() != 3 {
			return fmt.Errorf("stop PostgreSQL in %s: %w\n%s", c.dataDir, err, out)
		}
	}
	c.started = false
	return nil
}

// binaries are the PostgreSQL programs the cluster is run with.
type binaries struct {
	initdb, pgCtl string
}

// serverPrograms must all be present for a folder of binaries to be usable;
// pg_ctl runs the postgres beside it.
var serverPrograms = []string{"initdb", "pg_ctl", "postgres"}

// findBinaries looks on PATH, then in `pg_config --bindir`, then in the
// folders Debian/Ubuntu and source builds install to, since distribution
// packages usually keep the server programs off PATH.
func findBinaries(ctx context.Context) (binaries, error) {
	var onPath []string
	for _, name := range serverPrograms {
		if p, err := exec.LookPath(name); err == nil {
			onPath = append(onPath, p)
		}
	}
	if len(onPath) == len(serverPrograms) {
		return binaries{initdb: onPath[0], pgCtl: onPath[1]}, nil
	}

	var dirs []string
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	dirs = append(dirs, debianBinDirs()...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, dir := range dirs {
		if hasServerPrograms(dir) {
			return binaries{initdb: filepath.Join(dir, "initdb"), pgCtl: filepath.Join(dir, "pg_ctl")}, nil
		}
	}
	return binaries{}, fmt.Errorf("looked on PATH, in `pg_config --bindir`, /usr/lib/postgresql/*/bin and /usr/local/pgsql/bin: %w", ErrNoBinaries)
}

// Program finds one of PostgreSQL's client programs (pgbench, psql) where
// the server programs are found: on PATH, or beside them.
func Program(ctx context.Context, name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	bins, err := findBinaries(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(bins.pgCtl), name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not beside pg_ctl: %w", name, err)
	}
	return p, nil
}

// debianBinDirs lists /usr/lib/postgresql/<version>/bin, newest first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // the pattern is valid
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64) // "15", "9.6"; others sort last
		return v
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

func hasServerPrograms(dir string) bool {
	for _, name := range serverPrograms {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

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

// prepare makes the socket folder and, the first time, the cluster, both
// owned by the server account.
func (c *Cluster) prepare(ctx context.Context, logf func(string, ...any)) error {
	if err := c.ownedDir(c.sockDir); err != nil {
		return fmt.Errorf("prepare PostgreSQL socket folder: %w", err)
	}
	_, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION"))
	if err == nil {
		if err := c.ownedDir(c.dataDir); err != nil {
			return fmt.Errorf("prepare PostgreSQL data folder: %w", err)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect PostgreSQL data folder: %w", err)
	}
	if entries, err := os.ReadDir(c.dataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty but holds no PostgreSQL cluster (no PG_VERSION); move it away or choose another data folder", c.dataDir)
	}
	logf("initialising a PostgreSQL cluster in %s", c.dataDir)
	return c.initdb(ctx)
}

// initdb creates the cluster in a staging folder renamed into place when
// complete, so an interrupted first run leaves nothing half made at dataDir.
func (c *Cluster) initdb(ctx context.Context) error {
	staging := c.dataDir + ".init"
	var outs []string
	// C.UTF-8 sorts like C but keeps UTF-8 character classes; systems
	// without it get the plain C locale.
	for _, locale := range []string{"--locale=C.UTF-8", "--no-locale"} {
		if err := os.RemoveAll(staging); err != nil {
			return fmt.Errorf("clear %s: %w", staging, err)
		}
		if err := c.ownedDir(staging); err != nil {
			return fmt.Errorf("prepare PostgreSQL data folder: %w", err)
		}
		out, err := c.run(ctx, c.bin.initdb, "-D", staging, "-U", "postgres", "--auth=trust", "-E", "UTF8", locale)
		if err == nil {
			if err := os.Rename(staging, c.dataDir); err != nil {
				return fmt.Errorf("move new cluster into place: %w", err)
			}
			return nil
		}
		outs = append(outs, fmt.Sprintf("initdb %s: %v\n%s", locale, err, out))
	}
	_ = os.RemoveAll(staging) // best effort; the next run clears it anyway
	return fmt.Errorf("initialise PostgreSQL cluster in %s:\n%s", c.dataDir, strings.Join(outs, "\n"))
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

// running tells whether a server already answers on the socket. An answer
// that is an error (still starting, too many clients) counts too. A leftover
// postmaster.pid alone does not: postgres itself decides whether it is
// stale when started, more reliably than a root process could, since a
// reused pid looks alive to root.
func (c *Cluster) running(ctx context.Context) bool {
	err := c.ping(ctx)
	var pgErr *pgconn.PgError
	return err == nil || errors.As(err, &pgErr)
}

func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (c *Cluster) start(ctx context.Context) error {
	logFile := filepath.Join(c.dataDir, logName)
	// pg_ctl hands -o to postgres through /bin/sh, hence the quoting.
	serverOpts := fmt.Sprintf("-c listen_addresses='' -k %s -p %d -c max_connections=200", shellQuote(c.sockDir), port)
	for _, setting := range c.settings {
		serverOpts += " -c " + shellQuote(setting)
	}
	out, err := c.run(ctx, c.bin.pgCtl, "start", "-w", "-t", "60", "-D", c.dataDir, "-l", logFile, "-o", serverOpts)
	if err != nil {
		return fmt.Errorf("start PostgreSQL in %s: %w\n%s\nend of %s:\n%s", c.dataDir, err, out, logFile, tail(logFile))
	}
	return nil
}

// waitReady returns once the server accepts connections, or fails after
// readyTimeout.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			logFile := filepath.Join(c.dataDir, logName)
			return fmt.Errorf("PostgreSQL in %s does not accept connections: %w\nend of %s:\n%s", c.dataDir, err, logFile, tail(logFile))
		case <-tick.C:
		}
	}
}

// run runs a PostgreSQL program as the server account, from "/" so a
// working folder closed to that account does not matter, and without PG*
// variables that would override the explicit arguments.
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = "/"
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs}
	}
	return cmd.CombinedOutput()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	const maxBytes, maxLines = 8 << 10, 20
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, max(0, fi.Size()-maxBytes), maxBytes))
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-maxLines):], "\n")
}
