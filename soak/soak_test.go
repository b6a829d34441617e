package soak_test

// TestSoak drives two real rebill processes on one database with a seeded
// random schedule of customer actions, clock moves, gateway faults, node
// crashes and dropped database connections; then lets everything settle
// and judges the result with the invariants of package soak against the
// simulated gateways' own ledgers. See SOAK.md.
//
//	go test ./soak -run TestSoak                                   # the CI seed set
//	go test ./soak -run TestSoak -soak.seed=7 -soak.duration=10m -timeout 0
//	go test ./soak -run TestSoak -soak.replay=testdata/failures/seed-7.json

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/soak"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/proctest"
)

var (
	seedFlag     = flag.Uint64("soak.seed", 0, "first seed; 0 runs the CI seed set")
	durationFlag = flag.Duration("soak.duration", 0, "total soak time: schedules of -soak.schedule each, seeds seed, seed+1, ...")
	scheduleFlag = flag.Duration("soak.schedule", 5*time.Minute, "how long one schedule generates steps")
	replayFlag   = flag.String("soak.replay", "", "replay the schedule in this file")
	connsFlag    = flag.Int("soak.conns", 0, "REBILL_DB_MAX_CONNS of each node (0: 8 for the CI seed set, else 10)")
	failDirFlag  = flag.String("soak.failures", filepath.Join("testdata", "failures"), "folder for the schedules and logs of failing runs")
	paceFlag     = flag.Duration("soak.pace", 40*time.Millisecond, "pause between launching two steps")
	windowFlag   = flag.Int("soak.window", 4, "steps in flight at once")
	reportFlag   = flag.String("soak.report", "", "append one JSON line per schedule to this file")
	maxSubsFlag  = flag.Int("soak.subs", 0, "subscriptions a schedule creates at most (0: by its length)")
	verboseFlag  = flag.Bool("soak.verbose", false, "log what the settling waits on")
)

// The CI seed set: short schedules, run one after another in the normal
// `go test ./...`.
var ciSeeds = []uint64{1, 2}

const ciLength = 15 * time.Second

const adminKey = "soak-admin-key-0123456789abcdefghijklmn"

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs two rebill processes")
	}
	if *replayFlag != "" {
		if *connsFlag == 0 {
			*connsFlag = 10
		}
		s, err := soak.LoadSchedule(*replayFlag)
		if err != nil {
			t.Fatal(err)
		}
		runSchedule(t, s, nil)
		return
	}
	if *seedFlag == 0 && *durationFlag == 0 {
		if *connsFlag == 0 {
			*connsFlag = 8 // beside the rest of the suite on a shared server
		}
		for _, seed := range ciSeeds {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				runSchedule(t, newSchedule(seed, ciLength), generatorConfig(ciLength))
			})
		}
		return
	}
	if *connsFlag == 0 {
		*connsFlag = 10
	}
	seed, total := *seedFlag, *durationFlag
	if total == 0 {
		total = *scheduleFlag
	}
	start := time.Now()
	for i := uint64(0); ; i++ {
		left := total - time.Since(start)
		if left < 10*time.Second {
			break
		}
		length := min(*scheduleFlag, left)
		s := seed + i
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			runSchedule(t, newSchedule(s, length), generatorConfig(length))
		})
	}
}

func newSchedule(seed uint64, length time.Duration) *soak.Schedule {
	return &soak.Schedule{Seed: seed, Length: length.String(), Pace: paceFlag.String(), Window: *windowFlag}
}

func generatorConfig(length time.Duration) *soak.GeneratorConfig {
	maxSubs := *maxSubsFlag
	if maxSubs == 0 {
		maxSubs = min(150, 10+int(length/(3*time.Second)))
	}
	return &soak.GeneratorConfig{MaxSubscriptions: maxSubs, LiveSubscriptions: min(40, maxSubs), Chaos: true,
		Autopay: 0.2, MaxEnrollments: min(60, 6+int(length/(5*time.Second))), Failover: true}
}

// runner runs one schedule against two nodes on a fresh database.
type runner struct {
	t    *testing.T
	seed uint64
	ctx  context.Context
	db   *pgxpool.Pool
	// pair is the replication pair the database runs on (nil on the
	// shared server, for pairMissing's reason); failoverTook how long
	// each failover took, failoverOpen the work open when it began.
	pair         *dbPair
	pairMissing  string
	failoverTook []time.Duration
	failoverOpen []string
	bin          string
	dir          string
	env          map[string]string
	start        time.Time

	nodesMu sync.Mutex
	nodes   [2]*proc
	old     []*proc // killed processes, for their logs
	kills   int

	obsMu  sync.Mutex
	obs    soak.Observations
	subIDs map[int]string
	// enrIDs and enrSteps are the enrollments created, by number, and
	// the steps that created them.
	enrIDs   map[int]string
	enrSteps map[int]soak.Step
	// enrolled are the enrollments rebill created, by id.
	enrolled map[string]*enrolledAccount
	// clockTargets counts the clock moves aimed at a bill's moment.
	clockTargets int
	cards        map[int]soak.Card // each subscription's card, as rebill last confirmed it
	devNow       time.Time

	notes  []string // what the driver could not do, for the report
	counts map[string]int
	// changeAnswers counts the answers to updates, removals and ends of
	// trials by status and problem type: how many of them the run tried.
	changeAnswers    map[string]int
	driverViolations []soak.Violation // what the driver saw break (idempotent replays)
}

// soakExperiments are the experiments every soak node runs.
const soakExperiments = `
- key: soak-dunning
  policy: dunning
  start: 2020-01-01T00:00:00Z
  arms:
    - {name: control, weight: 1}
    - {name: short, weight: 1, dunning: [1d, 2d, 4d], hour: 9}
- key: soak-timeout
  policy: gateway_timeout
  start: 2020-01-01T00:00:00Z
  arms:
    - {name: control, weight: 1}
    - {name: patient, weight: 1, timeout: 600ms, retry_base: 100ms, retry_max: 500ms}
`

func runSchedule(t *testing.T, sched *soak.Schedule, gen *soak.GeneratorConfig) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	began := time.Now()
	var dbURL, pairMissing string
	pair, err := startPair(t, ctx)
	switch {
	case errors.Is(err, pgembed.ErrNoBinaries):
		pairMissing = err.Error()
		t.Logf("the database runs on the shared server, without failovers: %v", err)
		dbURL = dbtest.URL(t)
		if gen != nil {
			gen.Failover = false
		}
	case err != nil:
		t.Fatalf("start the replication pair: %v", err)
	default:
		dbURL = pair.url
		t.Logf("the database runs on a synchronous replication pair (%s), started in %s", dbURL, time.Since(began).Round(10*time.Millisecond))
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	cfg.ConnConfig.RuntimeParams["application_name"] = "rebill-soak"
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	r := &runner{
		t: t, seed: sched.Seed, ctx: ctx, db: db, bin: proctest.Binary(t), dir: t.TempDir(), pair: pair, pairMissing: pairMissing,
		env: map[string]string{
			"DATABASE_URL":             dbURL,
			"REBILL_DEV":               "1",
			"REBILL_ADMIN_KEY":         adminKey,
			"REBILL_GATEWAY_TIMEOUT":   "400ms",
			"REBILL_RETRY_BASE":        "50ms",
			"REBILL_RETRY_MAX":         "300ms",
			"REBILL_SCAN_INTERVAL":     "200ms",
			"REBILL_RESCUE_AFTER":      "12s",
			"REBILL_IDEMPOTENCY_LEASE": "10s",
			"REBILL_UNAVAILABLE_FOR":   "30s",
			"REBILL_BREAKER_OPEN_FOR":  "2s",
			"REBILL_CATCH_UP_WINDOW":   "87600h",
			"REBILL_SHUTDOWN_TIMEOUT":  "5s",
			"REBILL_LOG_LEVEL":         "warn",
			"REBILL_DB_MAX_CONNS":      fmt.Sprint(*connsFlag),
		},
		subIDs: map[int]string{}, enrIDs: map[int]string{}, enrSteps: map[int]soak.Step{}, enrolled: map[string]*enrolledAccount{},
		cards:  map[int]soak.Card{},
		counts: map[string]int{}, changeAnswers: map[string]int{},
		obs: soak.Observations{Subscriptions: map[string]*soak.ObservedSubscription{}},
	}
	// Billing runs under experiments, so that the invariants hold for
	// charges in treatment arms too: a shorter dunning schedule with its
	// retries moved to an hour of day, and a longer call timeout with its
	// own backoff (within what REBILL_RESCUE_AFTER allows).
	r.env["REBILL_EXPERIMENTS_FILE"] = filepath.Join(r.dir, "experiments.yaml")
	if err := os.WriteFile(r.env["REBILL_EXPERIMENTS_FILE"], []byte(soakExperiments), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.nodesMu.Lock()
		defer r.nodesMu.Unlock()
		for _, p := range r.nodes {
			if p != nil && !p.Exited() {
				_ = p.Kill()
			}
		}
	})
	for i := range r.nodes {
		if err := r.startNode(i); err != nil {
			t.Fatal(err)
		}
	}
	var clock struct {
		Now time.Time `json:"now"`
	}
	if a, ok := r.request(0, http.MethodGet, "/v1/dev/clock", "", nil, 30*time.Second); !ok || a.decode(&clock) != nil {
		t.Fatalf("read the dev clock: %d %s", a.status, a.body)
	}
	r.devNow = clock.Now

	sampler := r.sampleUnpaid()
	r.start = time.Now()
	requestsBefore := requests.Load()
	if gen != nil {
		length, _ := time.ParseDuration(sched.Length)
		g := soak.NewGenerator(sched.Seed, *gen)
		deadline := r.start.Add(length)
		r.execute(func() (soak.Step, bool) {
			if time.Now().After(deadline) {
				return soak.Step{}, false
			}
			s := g.Next()
			sched.Steps = append(sched.Steps, s)
			return s, true
		}, sched)
	} else {
		i := 0
		r.execute(func() (soak.Step, bool) {
			if i >= len(sched.Steps) {
				return soak.Step{}, false
			}
			i++
			return sched.Steps[i-1], true
		}, sched)
	}
	stepsTook := time.Since(r.start)
	stepRequests := requests.Load() - requestsBefore

	r.drain()
	sampler()
	d := r.collect()
	bills := r.collectBills(d)
	d.Fines = r.collectFines(bills)
	violations := append(soak.CheckAll(d), r.driverViolations...)
	violations = append(violations, billViolations(bills)...)
	violations = append(violations, r.selfAudit(clock.Now, d.Now)...)
	expViolations, treated := r.experimentViolations()
	violations = append(violations, expViolations...)
	cov := soak.Measure(d)
	total := time.Since(r.start)

	summary := map[string]any{
		"seed": sched.Seed, "steps": len(sched.Steps), "steps_seconds": stepsTook.Seconds(), "total_seconds": total.Seconds(),
		"requests": stepRequests, "requests_per_minute": float64(stepRequests) / stepsTook.Minutes(),
		"steps_per_minute":       float64(len(sched.Steps)) / stepsTook.Minutes(),
		"gateway_ops_per_minute": float64(len(d.Ledger)) / total.Minutes(),
		"coverage":               cov, "violations": len(violations), "kinds": r.counts, "node_kills": r.kills,
		"clock_moves": len(r.obs.ClockMoves), "dev_days": d.Now.Sub(clock.Now).Hours() / 24, "notes": r.notes,
		"autopay": billCounts(bills), "clock_moves_at_bills": r.clockTargets, "paid_elsewhere": fineCounts(d.Fines),
		"registry_postings":         r.postingCounts(),
		"zhkh":                      r.zhkhCounts(),
		"change_answers":            r.changeAnswers,
		"charges_in_treatment_arms": treated,
		"database":                  r.database(),
		"failovers":                 r.failovers(),
		"setup_seconds":             r.start.Sub(began).Seconds(),
	}
	line, _ := json.Marshal(summary)
	t.Logf("summary: %s", line)
	if *reportFlag != "" {
		if f, err := os.OpenFile(*reportFlag, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n", line)
			f.Close()
		}
	}
	if len(violations) == 0 {
		for _, n := range r.notes {
			if strings.HasPrefix(n, "not quiet") {
				t.Logf("the drain was not quiet; schedule and logs written to %s", r.saveFailure(sched, nil, d))
				break
			}
		}
		return r
	}
	path := r.saveFailure(sched, violations, d)
	var b strings.Builder
	for i, v := range violations {
		if i == 60 {
			fmt.Fprintf(&b, "... and %d more (see %s)\n", len(violations)-60, path)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	t.Errorf("seed %d: %d invariant violations:\n%s\n%s\nschedule written to %s; replay with\n  go test ./soak -run TestSoak -soak.replay=%s",
		sched.Seed, len(violations), b.String(), sched.List(), path, path)
	return r
}

// saveFailure writes the schedule, the violations and the nodes' logs.
func (r *runner) saveFailure(sched *soak.Schedule, violations []soak.Violation, d *soak.Data) string {
	dir := *failDirFlag
	if err := os.MkdirAll(dir, 0o755); err != nil {
		dir = r.t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("seed-%d.json", sched.Seed))
	if err := sched.Save(path); err != nil {
		r.t.Logf("write schedule: %v", err)
	}
	var b strings.Builder
	for _, v := range violations {
		fmt.Fprintln(&b, v)
	}
	seen := map[string]bool{}
	for _, v := range violations {
		if v.Subscription != "" && !seen[v.Subscription] {
			seen[v.Subscription] = true
			b.WriteString("\n" + soak.Describe(d, v.Subscription))
		}
	}
	for _, n := range r.notes {
		b.WriteString("note: " + n + "\n")
	}
	b.WriteString("\n" + sched.List())
	_ = os.WriteFile(strings.TrimSuffix(path, ".json")+".txt", []byte(b.String()), 0o644)
	r.nodesMu.Lock()
	procs := append(append([]*proc(nil), r.old...), r.nodes[:]...)
	r.nodesMu.Unlock()
	var logs strings.Builder
	for _, p := range procs {
		if p != nil {
			fmt.Fprintf(&logs, "==== %s (%s)\n%s\n", p.Name, p.ExitState(), p.Output())
		}
	}
	_ = os.WriteFile(strings.TrimSuffix(path, ".json")+".log", []byte(logs.String()), 0o644)
	return path
}

func (r *runner) startNode(i int) error {
	r.nodesMu.Lock()
	n := len(r.old) + 2
	r.nodesMu.Unlock()
	p, err := proctest.Start(fmt.Sprintf("node %s#%d", string(rune('A'+i)), n), proctest.Options{Dir: r.dir, Env: r.env})
	if err != nil {
		return err
	}
	if err := p.WaitReady(60 * time.Second); err != nil {
		_ = p.Kill()
		return err
	}
	r.nodesMu.Lock()
	r.nodes[i] = p
	r.nodesMu.Unlock()
	return nil
}

// base returns the URL of node i, or of the other one when i is down;
// it waits while both are down (a restart is under way).
func (r *runner) base(i int) string {
	for {
		r.nodesMu.Lock()
		for k := 0; k < 2; k++ {
			p := r.nodes[(i+k)%2]
			if p != nil && !p.Exited() {
				r.nodesMu.Unlock()
				return p.URL
			}
		}
		r.nodesMu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// request sends one request and repeats it (POSTs with the same key) until
// rebill answers definitely or limit passes. ok is false without a
// definite answer.
func (r *runner) request(node int, method, path, idemKey string, body any, limit time.Duration) (answer, bool) {
	deadline := time.Now().Add(limit)
	var last answer
	for attempt := 0; ; attempt++ {
		a, err := sendOnce(r.ctx, r.base(node+attempt), method, path, adminKey, idemKey, body)
		requests.Add(1)
		if err == nil && !retryable(a) {
			return a, true
		}
		if err == nil {
			last = a
		} else {
			last = answer{status: 0, body: []byte(err.Error())}
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return last, false
		}
		time.Sleep(time.Duration(min(1000, 50*(attempt+1))) * time.Millisecond)
	}
}

// post sends a step's POST, twice at once to both nodes when the step
// says so; both tries must end with the same answer, byte for byte.
func (r *runner) post(step soak.Step, path string, body any) (answer, bool) {
	return r.send(step, http.MethodPost, path, body)
}

// send is post with another method.
func (r *runner) send(step soak.Step, method, path string, body any) (answer, bool) {
	if !step.Twice {
		return r.request(step.Node, method, path, r.idem(step, ""), body, 120*time.Second)
	}
	var wg sync.WaitGroup
	var answers [2]answer
	var oks [2]bool
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], oks[i] = r.request(step.Node+i, method, path, r.idem(step, ""), body, 120*time.Second)
		}()
	}
	wg.Wait()
	if oks[0] && oks[1] && (answers[0].status != answers[1].status || string(answers[0].body) != string(answers[1].body)) {
		r.obsMu.Lock()
		r.driverViolations = append(r.driverViolations, soak.Violation{Invariant: "idempotent-replay",
			Detail: fmt.Sprintf("step %d (%s): one Idempotency-Key answered %d %s and %d %s", step.N, step, answers[0].status,
				answers[0].body, answers[1].status, answers[1].body)})
		r.obsMu.Unlock()
	}
	if oks[0] {
		return answers[0], true
	}
	return answers[1], oks[1]
}

func (r *runner) note(format string, args ...any) {
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}
