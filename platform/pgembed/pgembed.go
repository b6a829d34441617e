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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

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
	// port is the server's port: on loopback TCP when tcp is set (a
	// replication pair's members reach each other there), else only the
	// socket file's name.
	port int
	tcp  bool
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
	return &Cluster{bin: bin, dataDir: dataDir, sockDir: socketDir(dataDir), runAs: runAs, port: port}, nil
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
	q.Set("port", strconv.Itoa(c.port))
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
	listen := "''"
	if c.tcp {
		listen = "127.0.0.1"
	}
	serverOpts := fmt.Sprintf("-c listen_addresses=%s -k %s -p %d -c max_connections=200", listen, shellQuote(c.sockDir), c.port)
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
