package drill_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/testkit/proctest"
)

// TestRestoreDrillShort is the restore drill small enough for the normal
// suite: 24 subscriptions billed before the backup, 8 created in the
// window the restore loses.
func TestRestoreDrillShort(t *testing.T) {
	runRestoreDrill(t, restorePlan{subs: 24, late: 8, seed: 1})
}

// TestRestoreDrillLong is the restore drill by hand (-drill.long): more
// subscriptions, three seeds.
func TestRestoreDrillLong(t *testing.T) {
	if !*longFlag {
		t.Skip("the long restore drill runs with -drill.long (docs/testing.md)")
	}
	for _, seed := range []int{21, 22, 23} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runRestoreDrill(t, restorePlan{subs: 120, late: 30, seed: seed})
		})
	}
}

// restorePlan is one restore run: subscriptions billed before the backup,
// subscriptions created after it (in the window the restore loses), and
// the seed that varies the card mix and the moment of the stop.
type restorePlan struct {
	subs int
	late int
	seed int
}

// restoreFigures are what a restore run measured beyond the failover
// drill's figures, for SOAK.md.
type restoreFigures struct {
	CapturesAtBackup int `json:"gateway_captures_at_backup"`
	// The lost window: what the clients and the gateway did between the
	// end of the backup and the stop, all of which the restore forgets.
	SubsInWindow     int `json:"subscriptions_created_in_lost_window"`
	CapturesInWindow int `json:"gateway_captures_in_lost_window"`
	RefundsInWindow  int `json:"gateway_refunds_in_lost_window"`
	// AuditAfterRestore are `rebill audit`'s findings by kind on the
	// restored database before any client retried or any node billed.
	AuditAfterRestore map[string]int `json:"audit_after_restore"`
	// Recreated counts the lost subscriptions the clients created again
	// with the same Idempotency-Key and that got the id they had.
	Recreated        int `json:"subscriptions_recreated_same_id"`
	RecreatedOtherID int `json:"subscriptions_recreated_other_id"`
}

// restoreDrill is a drill whose replica field is the database the nodes
// run on: the primary until the restore, the restored cluster after.
type restoreDrill struct {
	*drill
	rplan restorePlan
	rfig  restoreFigures
	dir   string
}

func runRestoreDrill(t *testing.T, plan restorePlan) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := &restoreDrill{
		drill: &drill{t: t, ctx: ctx, plan: drillPlan{subs: plan.subs, seed: plan.seed}, clk: &mirrorClock{},
			calls: &counter{seen: map[string]bool{}, delay: 80 * time.Millisecond}},
		rplan: plan,
	}
	d.fig.Mode, d.fig.Seed, d.fig.Subscriptions = "restore", plan.seed, plan.subs+plan.late
	began := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), name) }
	d.startPrimary()
	d.startGateway(d.primary.TCPURL("rebill"))
	d.startNodes()
	phase("primary, gateway and nodes started")

	now := d.devNow()
	d.clk.set(now)
	anchor := now.Add(time.Hour)
	early := d.createSubscriptions(anchor, 0, plan.subs)
	d.createEnrollments(autopayLoad(plan.subs))
	// The first period is billed and settled before the backup.
	d.moveClock(anchor)
	d.waitBilled(early, anchor)
	d.waitQuiet()
	phase("first period billed")
	backup := d.takeBackup()
	phase("base backup taken")

	late, lostAt := d.loseWindow(early, anchor)
	phase("billed in the window the restore loses; nodes and cluster stopped")
	d.restore(backup)
	phase("restored, nodes started")
	d.auditAfterRestore(lostAt)
	late = d.recreate(late, anchor.Add(24*time.Hour))
	// The operator moves the dev clock back to where time is: the restore
	// took it back to the backup's moment.
	d.moveClock(lostAt)
	d.repushBills()
	subs := append(append([]sub(nil), early...), late...)
	d.settleFrom(subs, anchor, 1)
	d.resendRefunds()
	d.waitAutopay()
	phase("settled")
	d.judge(subs)
	phase("judged")
	d.restoreReport()
}

// startPrimary starts one server (a primary, so pg_basebackup may copy
// it) in a folder the postgres user can reach; the nodes run on it.
func (d *restoreDrill) startPrimary() {
	dir, err := os.MkdirTemp("", "rebill-restore-drill-")
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	d.dir = dir
	port, err := proctest.FreePort()
	if err != nil {
		d.t.Fatal(err)
	}
	d.primary, err = pgembed.StartPrimary(d.ctx, pgembed.ReplicationOptions{DataDir: filepath.Join(dir, "primary"), Port: port})
	if errors.Is(err, pgembed.ErrNoBinaries) {
		d.t.Skipf("the restore drill needs PostgreSQL's server programs (initdb, pg_ctl, postgres, pg_basebackup): %v", err)
	}
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = d.primary.Stop(context.Background()) })
	d.replica = d.primary
	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("postgres"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close(d.ctx)
	if _, err := conn.Exec(d.ctx, `CREATE DATABASE rebill`); err != nil {
		d.t.Fatal(err)
	}
}

// takeBackup runs pg_basebackup against the running primary while the
// nodes run, and returns the backup's folder.
func (d *restoreDrill) takeBackup() string {
	dir := filepath.Join(d.dir, "backup")
	if err := d.primary.BaseBackup(d.ctx, dir); err != nil {
		d.fatalf("%v", err)
	}
	d.rfig.CapturesAtBackup = d.bookCaptures()
	return dir
}

// loseWindow is the billing the restore will forget: subscriptions
// created with Idempotency-Keys, refunds asked through the API, the clock
// moved a day so the next period falls due for every subscription; once
// the first captures are in, prices of early subscriptions changed and
// the issuers' bills pushed; once half the fines are accepted at the
// registry, the nodes and the cluster are stopped, the day's burst in
// flight. It returns the late subscriptions and the clock at the stop.
func (d *restoreDrill) loseWindow(early []sub, anchor time.Time) ([]sub, time.Time) {
	var startLSN string
	d.replicaQuery(`SELECT pg_current_wal_lsn()::text`, &startLSN)
	next := anchor.Add(24 * time.Hour)
	late := d.createSubscriptions(next, d.rplan.subs, d.rplan.subs+d.rplan.late)
	d.rfig.SubsInWindow = len(late)
	// Refunds of the first period's captures are asked before the clock
	// moves, so that the stop comes while the day's burst is in flight.
	d.refundSome()
	d.moveClock(next)
	threshold := d.rfig.CapturesAtBackup + d.rplan.subs/3 + d.rplan.seed%5
	d.waitFor("captures in the window", 60*time.Second, func() bool { return d.bookCaptures() >= threshold })
	d.updateSome(early, next)
	d.pushBills(next)
	d.waitFinesPosted()
	lostAt := d.devNow()

	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the primary: %v", err)
	}
	var chargesBefore int
	if err := conn.QueryRow(d.ctx, `SELECT count(*) FILTER (WHERE in_flight), count(*),
		greatest(0, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn))::bigint FROM charges`, startLSN).
		Scan(&d.fig.InFlightAtKill, &chargesBefore, &d.fig.WALBytesLost); err != nil {
		d.fatalf("read the primary before the stop: %v", err)
	}
	d.idsAtKill = d.chargeIDs(conn)
	_ = conn.Close(d.ctx)
	for _, p := range d.nodes {
		if _, err := p.Terminate(10 * time.Second); err != nil {
			d.t.Logf("%s: %v", p.Name, err)
		}
	}
	if err := d.primary.Stop(d.ctx); err != nil {
		d.fatalf("stop the primary: %v", err)
	}
	d.fig.CapturesAtKill = d.bookCaptures()
	d.autopayAtKill()
	d.rfig.CapturesInWindow = d.fig.CapturesAtKill - d.rfig.CapturesAtBackup
	if err := d.book.QueryRow(d.ctx, `SELECT count(*) FROM gatewaysim.operations WHERE op = 'refund' AND status = 'succeeded'`).
		Scan(&d.rfig.RefundsInWindow); err != nil {
		d.fatalf("read the gateway's refunds: %v", err)
	}
	d.fig.ChargesLost = chargesBefore
	d.t.Logf("stopped with %d charges in flight; %d captures and %d refunds at the gateway after the backup",
		d.fig.InFlightAtKill, d.rfig.CapturesInWindow, d.rfig.RefundsInWindow)
	return late, lostAt
}

// restore makes a new cluster from the backup on another port and starts
// new nodes on it.
func (d *restoreDrill) restore(backup string) {
	port, err := proctest.FreePort()
	if err != nil {
		d.t.Fatal(err)
	}
	began := time.Now()
	restored, err := pgembed.Restore(d.ctx, backup, pgembed.ReplicationOptions{DataDir: filepath.Join(d.dir, "restored"), Port: port})
	if err != nil {
		d.fatalf("%v", err)
	}
	d.t.Cleanup(func() { _ = restored.Stop(context.Background()) })
	d.replica = restored
	var kept int
	d.replicaQuery(`SELECT count(*) FROM charges`, &kept)
	d.fig.ChargesLost = max(0, d.fig.ChargesLost-kept)
	d.fig.CapturesUnknown = d.forgotten()
	d.replicaQuery(`SELECT count(*) FROM river_job WHERE state = 'running'`, &d.fig.OrphanJobs)
	d.calls.on.Store(true)
	d.env["DATABASE_URL"] = restored.TCPURL("rebill")
	d.nodes = nil
	d.startNodes()
	d.fig.Reconnected = time.Since(began).Round(10 * time.Millisecond).String()
	d.promoted = began
}

// auditAfterRestore runs `rebill audit` on the restored database before
// anyone retried or any node billed: every capture the gateway made that
// the restored database does not hold as succeeded must be listed, not
// silently lost. The audit runs up to the day of the stop: its default
// ends at the service clock's day, which the restore took back to the
// backup's (in production, the clock is the real one).
func (d *restoreDrill) auditAfterRestore(lostAt time.Time) {
	found, _ := d.runAudit("--to", lostAt.UTC().Format(time.DateOnly))
	d.rfig.AuditAfterRestore = map[string]int{}
	listed := map[string]bool{}
	for _, x := range found {
		d.rfig.AuditAfterRestore[x.Kind]++
		listed[x.ChargeKey] = true
	}
	for _, key := range d.forgottenKeys() {
		if !listed[key] {
			d.failures = append(d.failures, fmt.Sprintf("charge %s captured at the gateway in the lost window: the restored database does not hold it and rebill audit does not list it", key))
		}
	}
}

// recreate is each client whose subscription was created in the lost
// window creating it again with the same Idempotency-Key and body: the
// creation's id derives from the key, so the subscription gets the id it
// had, and its charges the gateway keys they had. It returns the
// subscriptions as the clients now hold them.
func (d *restoreDrill) recreate(late []sub, anchor time.Time) []sub {
	again := d.createSubscriptions(anchor, d.rplan.subs, d.rplan.subs+d.rplan.late)
	for i, s := range again {
		if s.id == late[i].id {
			d.rfig.Recreated++
			continue
		}
		d.rfig.RecreatedOtherID++
		d.failures = append(d.failures, fmt.Sprintf("subscription %s created again under the same Idempotency-Key as %s", late[i].id, s.id))
	}
	return again
}

// settleFrom bills and settles the day that began first days after
// anchor, then three more days one at a time (dunning's retries at 24 h
// and 48 h run their course).
func (d *restoreDrill) settleFrom(subs []sub, anchor time.Time, first int) {
	for day := first; day <= first+3; day++ {
		start := anchor.Add(time.Duration(day) * 24 * time.Hour)
		if day > first {
			to := start
			if now := d.devNow(); now.After(to) {
				to = now
			}
			d.moveClock(to)
		}
		var due []sub
		for _, s := range subs {
			if !s.anchor.After(start) {
				due = append(due, s)
			}
		}
		d.waitBilled(due, start)
		if day == first {
			d.resendUpdates(start.UTC().Format(time.DateOnly))
		}
		d.waitQuiet()
		if day == first {
			d.fig.SettledAfter = time.Since(d.promoted).Round(100 * time.Millisecond).String()
		}
	}
}

func (d *restoreDrill) restoreReport() {
	line, _ := json.Marshal(struct {
		figures
		restoreFigures
	}{d.fig, d.rfig})
	d.t.Logf("figures: %s", line)
	if *reportFlag != "" {
		if f, err := os.OpenFile(*reportFlag, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n", line)
			f.Close()
		}
	}
	if len(d.failures) > 0 {
		d.dumpLogs()
		d.t.Errorf("restore, seed %d: %d violations:\n  %s", d.plan.seed, len(d.failures), strings.Join(d.failures, "\n  "))
	}
}
