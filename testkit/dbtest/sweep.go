package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	databasePrefix = "rebill_t_"
	templatePrefix = "rebill_tpl_"
	// staleAfter: a test database this old belongs to no live run (the
	// suite's timeout is 15 minutes).
	staleAfter = time.Hour
	// staleTemplateAfter: templates of other schema checksums are kept a
	// day, since other branches' runs may still clone them; a dropped one is
	// rebuilt by the next run that needs it.
	staleTemplateAfter = 24 * time.Hour
)

// hostID names this machine and PID namespace, so that a creator PID in a
// database name is only judged by processes that see the same PIDs. Empty
// when it cannot be told: such names are judged by age alone.
var hostID = func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(boot)) + " " + ns))
	return hex.EncodeToString(sum[:4])
}()

// newDatabaseName is rebill_t_<unix seconds>_<pid>_<host id>_<random>: at
// most 46 bytes, within PostgreSQL's 63.
func newDatabaseName(now time.Time) string {
	host := hostID
	if host == "" {
		host = "0"
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s%d_%d_%s_%s", databasePrefix, now.Unix(), os.Getpid(), host, hex.EncodeToString(b))
}

// parsedName is what a test database's name tells about its creator.
type parsedName struct {
	created time.Time
	pid     int
	host    string
}

func parseDatabaseName(name string) (parsedName, bool) {
	parts := strings.Split(strings.TrimPrefix(name, databasePrefix), "_")
	if !strings.HasPrefix(name, databasePrefix) || len(parts) != 4 {
		return parsedName{}, false
	}
	secs, err1 := strconv.ParseInt(parts[0], 10, 64)
	pid, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return parsedName{}, false
	}
	return parsedName{created: time.Unix(secs, 0), pid: pid, host: parts[2]}, true
}

// creatorGone tells whether the process that created a database is known
// to have exited: it ran on this machine in this PID namespace and no
// process has its PID. A reused PID only keeps a database a little longer.
func (p parsedName) creatorGone() bool {
	if hostID == "" || p.host != hostID || p.pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(p.pid, 0), syscall.ESRCH)
}

// databaseInfo is one database the sweep looks at.
type databaseInfo struct {
	name        string
	connections int
	// created is when its folder was made (PG_VERSION's modification time),
	// zero when the server does not tell (pg_stat_file needs superuser or
	// pg_read_server_files).
	created time.Time
}

// staleDatabase decides whether a test database belongs to no live run.
// One somebody is connected to never is.
func staleDatabase(d databaseInfo, now time.Time) bool {
	if d.connections > 0 {
		return false
	}
	if p, ok := parseDatabaseName(d.name); ok {
		return now.Sub(p.created) > staleAfter || p.creatorGone()
	}
	// Names from before the creator was encoded: judge by the folder's age.
	return !d.created.IsZero() && now.Sub(d.created) > staleAfter
}

// staleTemplate decides whether a template database may go: never the
// current one, a half-built one after staleAfter, another checksum's after
// staleTemplateAfter.
func staleTemplate(d databaseInfo, current string, now time.Time) bool {
	if d.name == current || d.connections > 0 || d.created.IsZero() {
		return false
	}
	if strings.HasSuffix(d.name, "_building") {
		return d.name != current+"_building" && now.Sub(d.created) > staleAfter
	}
	return now.Sub(d.created) > staleTemplateAfter
}

// sweep drops test databases and templates that earlier runs left behind
// (runs killed or timed out before their cleanups). DROP without FORCE
// refuses a database somebody connected to meanwhile. Failures only log:
// a sweep is housekeeping, never a reason to fail a test.
func sweep(ctx context.Context, conn *pgx.Conn, currentTemplate string, now time.Time, logf func(string, ...any)) {
	dbs, err := listDatabases(ctx, conn)
	if err != nil {
		logf("dbtest: sweep: %v", err)
		return
	}
	var dropped []string
	for _, d := range dbs {
		if strings.HasPrefix(d.name, databasePrefix) && staleDatabase(d, now) {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()); err == nil {
				dropped = append(dropped, d.name)
			}
		}
	}
	_ = withLock(ctx, conn, func() error {
		for _, d := range dbs {
			if strings.HasPrefix(d.name, templatePrefix) && staleTemplate(d, currentTemplate, now) {
				if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()); err == nil {
					dropped = append(dropped, d.name)
				}
			}
		}
		return nil
	})
	if len(dropped) > 0 {
		logf("dbtest: dropped %d databases left by earlier runs: %s", len(dropped), strings.Join(dropped, ", "))
	}
}

// listDatabases lists the test databases and templates with their
// connection counts and, when the server tells, their creation times.
func listDatabases(ctx context.Context, conn *pgx.Conn) ([]databaseInfo, error) {
	rows, err := conn.Query(ctx, `
		SELECT d.datname, d.oid::text,
		       (SELECT count(*) FROM pg_stat_activity a WHERE a.datid = d.oid)::int
		FROM pg_database d
		WHERE left(d.datname, length($1)) = $1 OR left(d.datname, length($2)) = $2`,
		databasePrefix, templatePrefix)
	if err != nil {
		return nil, fmt.Errorf("list test databases: %w", err)
	}
	type row struct {
		databaseInfo
		oid string
	}
	found, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var r row
		if err := cr.Scan(&r.name, &r.oid, &r.connections); err != nil {
			return row{}, err
		}
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list test databases: %w", err)
	}
	out := make([]databaseInfo, len(found))
	for i, r := range found {
		out[i] = r.databaseInfo
		// Needs superuser or pg_read_server_files; without it the time
		// stays zero. Checked one by one: an error aborts only its query.
		var created time.Time
		if err := conn.QueryRow(ctx, `SELECT modification FROM pg_stat_file('base/' || $1 || '/PG_VERSION', true)`, r.oid).Scan(&created); err == nil {
			out[i].created = created
		}
	}
	return out, nil
}
