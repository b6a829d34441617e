package pgembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A replication pair is a primary and a streaming replica on loopback TCP,
// for failover drills: the primary is killed the way a machine dies
// (`pg_ctl stop -m immediate`, no shutdown checkpoint) and the replica is
// promoted. The settings follow the PostgreSQL 15 manual, "Log-Shipping
// Standby Servers" (https://www.postgresql.org/docs/15/warm-standby.html):
// wal_level=replica and max_wal_senders on the primary, a physical
// replication slot so the primary keeps the WAL the replica has not
// received, and a replica made by `pg_basebackup -R`, which writes
// standby.signal and primary_conninfo
// (https://www.postgresql.org/docs/15/app-pgbasebackup.html).

// slotName is the physical replication slot the replica streams from.
const slotName = "drill_replica"

// ReplicationOptions configures one member of a replication pair.
type ReplicationOptions struct {
	// DataDir holds the member's cluster; it must not exist yet, or be
	// empty. It must be reachable by the postgres user when this process
	// is root (not under a mode-700 t.TempDir: see [chooseDataDir]).
	DataDir string
	// Port is the loopback TCP port the member listens on.
	Port int
	// Settings are extra server settings ("name=value").
	Settings []string
}

// Member is one running server of a replication pair, started by this
// process, which alone stops it.
type Member struct {
	*Cluster
}

// replicationSettings make a server able to feed a streaming replica and,
// once promoted, to be fed one in turn; hot_standby lets a replica answer
// reads (a report's) while it follows.
var replicationSettings = []string{
	"wal_level=replica", "max_wal_senders=5", "max_replication_slots=5", "hot_standby=on",
	"wal_keep_size=64MB", "max_connections=100", "fsync=on",
}

// StartPrimary initialises and starts a primary ready for a streaming
// replica: WAL for replication and replication connections from loopback
// trusted ([Member.StartReplica] makes the replication slot).
func StartPrimary(ctx context.Context, opts ReplicationOptions) (*Member, error) {
	c, err := locate(ctx, Options{DataDir: opts.DataDir}, func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	c.port, c.tcp = opts.Port, true
	c.settings = append(append([]string(nil), replicationSettings...), opts.Settings...)
	if err := c.prepare(ctx, func(string, ...any) {}); err != nil {
		return nil, err
	}
	if err := c.trustLoopbackReplication(); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	c.started = true
	m := &Member{c}
	if err := c.waitReady(ctx); err != nil {
		_ = m.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return m, nil
}

// trustLoopbackReplication lets replication connections from loopback in
// without a password (initdb --auth=trust already trusts the others).
func (c *Cluster) trustLoopbackReplication() error {
	hba := filepath.Join(c.dataDir, "pg_hba.conf")
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open pg_hba.conf: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString("\nhost replication all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 trust\n"); err != nil {
		return fmt.Errorf("write pg_hba.conf: %w", err)
	}
	return nil
}

// StartReplica makes a streaming replica of m with `pg_basebackup -R` from
// its slot, starts it and waits until m sees it streaming. With sync the
// primary is then made to wait for the replica's flush before it reports
// a commit (synchronous_standby_names='*', synchronous_commit=on: see
// https://www.postgresql.org/docs/15/runtime-config-replication.html), so
// a promotion loses no commit a client was told of; without it the
// replication is asynchronous and the last commits may be lost.
func (m *Member) StartReplica(ctx context.Context, opts ReplicationOptions, sync bool) (*Member, error) {
	r, err := locate(ctx, Options{DataDir: opts.DataDir}, func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	r.port, r.tcp = opts.Port, true
	r.settings = append(append([]string(nil), replicationSettings...), opts.Settings...)
	if err := r.ownedDir(r.sockDir); err != nil {
		return nil, fmt.Errorf("prepare replica socket folder: %w", err)
	}
	if err := r.ownedDir(r.dataDir); err != nil {
		return nil, fmt.Errorf("prepare replica data folder: %w", err)
	}
	// A promoted replica has no slot of its own (pg_basebackup leaves
	// pg_replslot out), so the slot is made wherever it is missing: the
	// member promoted in a failover then feeds a new replica the same way.
	if err := m.exec(ctx, `SELECT pg_create_physical_replication_slot($1)
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slotName); err != nil {
		return nil, fmt.Errorf("create replication slot on port %d: %w", m.port, err)
	}
	out, err := r.run(ctx, r.basebackupProgram(), "-h", "127.0.0.1", "-p", strconv.Itoa(m.port), "-U", "postgres",
		"-D", r.dataDir, "-R", "-X", "stream", "-S", slotName, "--checkpoint=fast")
	if err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d: %w\n%s", m.port, err, out)
	}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	r.started = true
	replica := &Member{r}
	if err := r.waitReady(ctx); err != nil {
		_ = replica.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	want := "async"
	if sync {
		want = "sync"
		if err := m.exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
			return nil, err
		}
		if err := m.exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return nil, err
		}
	}
	if err := m.await(ctx, "the replica streaming "+want, `SELECT EXISTS (SELECT 1 FROM pg_stat_replication
		WHERE state = 'streaming' AND sync_state = $1)`, want); err != nil {
		_ = replica.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return replica, nil
}

// Kill stops the server the way a crash does: `pg_ctl stop -m immediate`
// ends every process at once, without a checkpoint, and tells no replica.
func (m *Member) Kill(ctx context.Context) error {
	out, err := m.run(ctx, m.bin.pgCtl, "stop", "-D", m.dataDir, "-m", "immediate", "-w")
	if err != nil {
		return fmt.Errorf("kill PostgreSQL in %s: %w\n%s", m.dataDir, err, out)
	}
	m.started = false
	return nil
}

// Promote turns a replica into a primary (`pg_ctl promote`) and returns
// once it accepts writes.
func (m *Member) Promote(ctx context.Context) error {
	out, err := m.run(ctx, m.bin.pgCtl, "promote", "-D", m.dataDir, "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("promote PostgreSQL in %s: %w\n%s", m.dataDir, err, out)
	}
	return m.await(ctx, "the promoted server to accept writes",
		`SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'`)
}

// Stop shuts the member down if it is running, and removes its socket
// folder (a killed member's too).
func (m *Member) Stop(ctx context.Context) error {
	var err error
	if m.started {
		err = m.stop(ctx)
	}
	_ = os.Remove(m.sockDir)
	return err
}

// Port is the loopback TCP port the member listens on.
func (m *Member) Port() int { return m.port }

// TCPURL is a connection string for database dbname on the member's
// loopback port, whether it accepts writes or not.
func (m *Member) TCPURL(dbname string) string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(m.port) + "/" + dbname + "?sslmode=disable&connect_timeout=2"
}

// MultiHostURL is a connection string naming every member in order, with
// target_session_attrs=read-write: a client tries them in turn and keeps
// the first that accepts writes, so after a promotion new connections
// reach the new primary with no configuration change
// (https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-MULTIPLE-HOSTS).
func MultiHostURL(dbname string, members ...*Member) string {
	hosts := make([]string, len(members))
	for i, m := range members {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(m.port)
	}
	q := url.Values{}
	q.Set("sslmode", "disable")
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + dbname + "?" + q.Encode()
}

// exec runs one statement on the member's postgres database.
func (m *Member) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, m.TCPURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// await polls a query answering one boolean until it answers true.
func (m *Member) await(ctx context.Context, what, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		var ok bool
		err := func() error {
			conn, err := pgx.Connect(ctx, m.URL("postgres"))
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			return conn.QueryRow(ctx, sql, args...).Scan(&ok)
		}()
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s on port %d: %w", what, m.port, errors.Join(ctx.Err(), last))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// basebackupProgram is the pg_basebackup beside the real pg_ctl (PATH may
// hold only links to it), so of the server's own version.
func (c *Cluster) basebackupProgram() string {
	serverDir := filepath.Dir(c.bin.pgCtl)
	if real, err := filepath.EvalSymlinks(c.bin.pgCtl); err == nil {
		serverDir = filepath.Dir(real)
	}
	return filepath.Join(serverDir, "pg_basebackup")
}

// BaseBackup copies the running member into dir, which must not exist yet
// or be empty, with `pg_basebackup -X stream`: a plain-format backup that
// carries the WAL written while it was taken, so it starts as a cluster of
// its own and recovers to the moment the backup ended
// (https://www.postgresql.org/docs/15/app-pgbasebackup.html). dir must be
// reachable by the server account, as DataDir is.
func (m *Member) BaseBackup(ctx context.Context, dir string) error {
	if err := m.ownedDir(dir); err != nil {
		return fmt.Errorf("prepare backup folder: %w", err)
	}
	out, err := m.run(ctx, m.basebackupProgram(), "-h", "127.0.0.1", "-p", strconv.Itoa(m.port), "-U", "postgres",
		"-D", dir, "-X", "stream", "--checkpoint=fast")
	if err != nil {
		return fmt.Errorf("pg_basebackup from port %d: %w\n%s", m.port, err, out)
	}
	return nil
}

// Restore makes a new cluster in opts.DataDir from a base backup taken by
// [Member.BaseBackup] (a copy, so the backup stays usable for another
// restore) and starts it as a primary: the server replays the WAL the
// backup carries and opens at the point the backup ended; everything
// committed after it is gone. The replication slots of the backed-up
// server are not in the backup (pg_basebackup leaves pg_replslot out).
func Restore(ctx context.Context, backup string, opts ReplicationOptions) (*Member, error) {
	r, err := locate(ctx, Options{DataDir: opts.DataDir}, func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	r.port, r.tcp = opts.Port, true
	r.settings = append(append([]string(nil), replicationSettings...), opts.Settings...)
	if err := r.ownedDir(r.sockDir); err != nil {
		return nil, fmt.Errorf("prepare restored socket folder: %w", err)
	}
	if err := r.ownedDir(r.dataDir); err != nil {
		return nil, fmt.Errorf("prepare restored data folder: %w", err)
	}
	if entries, err := os.ReadDir(r.dataDir); err != nil || len(entries) > 0 {
		return nil, fmt.Errorf("restore into %s: the folder must be empty (%v)", r.dataDir, err)
	}
	// cp -a as the server account keeps the modes PostgreSQL checks.
	if out, err := r.run(ctx, "cp", "-a", backup+string(filepath.Separator)+".", r.dataDir); err != nil {
		return nil, fmt.Errorf("copy backup %s into %s: %w\n%s", backup, r.dataDir, err, out)
	}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	r.started = true
	m := &Member{r}
	if err := r.waitReady(ctx); err != nil {
		_ = m.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return m, nil
}
