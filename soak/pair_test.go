package soak_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/soak"
	"github.com/rebill/rebill/testkit/proctest"
)

// dbPair is the soak's database: a private primary and a synchronous
// streaming replica, so that a failover loses no commit anyone was told
// of and the invariants judge the run as if nothing had happened. The
// nodes, the driver's pool and every direct read use one multi-host URL
// (target_session_attrs=read-write) that never changes: a failover starts
// the new replica on the dead primary's port.
type dbPair struct {
	dir   string
	ports [2]int
	url   string

	mu        sync.Mutex
	members   [2]*pgembed.Member
	primary   int // index in members of the member that accepts writes
	made      int // members started so far, for their folders' names
	failovers int
}

// startPair starts the pair with database rebill on it (the nodes migrate
// it), in a folder the postgres user can reach (the tests may run as
// root). err wraps pgembed.ErrNoBinaries without PostgreSQL's server
// programs.
func startPair(t *testing.T, ctx context.Context) (*dbPair, error) {
	dir, err := os.MkdirTemp("", "rebill-soak-")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	p := &dbPair{dir: dir}
	for i := range p.ports {
		if p.ports[i], err = proctest.FreePort(); err != nil {
			return nil, err
		}
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, m := range p.members {
			if m != nil {
				_ = m.Stop(context.Background())
			}
		}
	})
	p.members[0], err = pgembed.StartPrimary(ctx, pgembed.ReplicationOptions{DataDir: p.nextDir(), Port: p.ports[0]})
	if err != nil {
		return nil, err
	}
	if p.members[1], err = p.members[0].StartReplica(ctx, pgembed.ReplicationOptions{DataDir: p.nextDir(), Port: p.ports[1]}, true); err != nil {
		return nil, err
	}
	if err := execOn(ctx, p.members[0], `CREATE DATABASE rebill`); err != nil {
		return nil, fmt.Errorf("create database rebill: %w", err)
	}
	p.url = pgembed.MultiHostURL("rebill", p.members[0], p.members[1])
	return p, nil
}

func (p *dbPair) nextDir() string {
	p.made++
	return filepath.Join(p.dir, fmt.Sprintf("member-%d", p.made))
}

// failover kills the primary the way a machine dies, promotes the replica
// and starts a new synchronous replica from it on the dead one's port,
// in a fresh folder. It returns the port that accepts writes now.
//
// While the promoted member is alone nothing may wait for a standby:
// synchronous_standby_names is reset on it (its configuration was copied
// before its old primary was told to wait, so this only makes sure), and
// StartReplica sets it again once the new replica streams. Commits in
// that window live on one server only, which is why failovers wait for
// each other.
func (p *dbPair) failover(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dead, next := p.primary, 1-p.primary
	if p.members[next] == nil {
		return 0, fmt.Errorf("no replica to promote on port %d: the last failover could not start one", p.ports[next])
	}
	if err := p.members[dead].Kill(ctx); err != nil {
		return 0, err
	}
	if err := p.members[next].Promote(ctx); err != nil {
		return 0, err
	}
	if err := execOn(ctx, p.members[next], `ALTER SYSTEM RESET synchronous_standby_names`); err != nil {
		return 0, fmt.Errorf("reset synchronous_standby_names on the promoted member: %w", err)
	}
	if err := execOn(ctx, p.members[next], `SELECT pg_reload_conf()`); err != nil {
		return 0, fmt.Errorf("reload the promoted member's configuration: %w", err)
	}
	p.primary = next
	p.failovers++
	old := p.members[dead]
	_ = old.Stop(ctx) // only removes its socket folder: it is dead
	if err := os.RemoveAll(old.DataDir()); err != nil {
		return 0, fmt.Errorf("remove the dead primary's folder: %w", err)
	}
	replica, err := p.members[next].StartReplica(ctx, pgembed.ReplicationOptions{DataDir: p.nextDir(), Port: p.ports[dead]}, true)
	if err != nil {
		p.members[dead] = nil
		return 0, fmt.Errorf("start a new replica on port %d: %w", p.ports[dead], err)
	}
	p.members[dead] = replica
	return p.ports[next], nil
}

// state is the port of the member that accepts writes and the failovers
// done.
func (p *dbPair) state() (primaryPort, failovers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ports[p.primary], p.failovers
}

// execOn runs one statement on a member's postgres database.
func execOn(ctx context.Context, m *pgembed.Member, sql string) error {
	conn, err := pgx.Connect(ctx, m.TCPURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// failover runs a failover step and waits until a node answers a request
// that reads the database again.
func (r *runner) failover(step soak.Step) {
	if r.pair == nil {
		r.note("step %d: failover: the database is not a replication pair (%s)", step.N, r.pairMissing)
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	open := r.openWork()
	began := time.Now()
	port, err := r.pair.failover(ctx)
	if err != nil {
		r.t.Errorf("step %d: failover: %v", step.N, err)
		return
	}
	// The driver's idle connections went with the primary.
	r.db.Reset()
	r.obsMu.Lock()
	r.failoverTook = append(r.failoverTook, time.Since(began))
	r.failoverOpen = append(r.failoverOpen, open)
	r.obsMu.Unlock()
	if a, ok := r.request(step.Node, http.MethodGet, "/v1/dev/clock", "", nil, 60*time.Second); !ok {
		r.note("step %d: after the failover to port %d no node read the clock: %d %s", step.N, port, a.status, a.body)
	}
}

// database describes where the schedule's database ran, for its summary.
func (r *runner) database() map[string]any {
	if r.pair == nil {
		return map[string]any{"kind": "shared server", "why": r.pairMissing}
	}
	_, failovers := r.pair.state()
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	took := make([]float64, len(r.failoverTook))
	for i, d := range r.failoverTook {
		took[i] = d.Round(10 * time.Millisecond).Seconds()
	}
	return map[string]any{"kind": "synchronous pair", "failovers": failovers, "failover_seconds": took}
}

// failovers is how many failovers the schedule's database went through.
func (r *runner) failovers() int {
	if r.pair == nil {
		return 0
	}
	_, n := r.pair.state()
	return n
}
