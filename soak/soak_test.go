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
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	strictFlag   = flag.Bool("soak.strict", false, "fail on known, written-up defects too (soak.KnownDefects)")
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
		Autopay: 0.2, MaxEnrollments: min(60, 6+int(length/(5*time.Second)))}
}

// runner runs one schedule against two nodes on a fresh database.
type runner struct {
	t     *testing.T
	seed  uint64
	ctx   context.Context
	db    *pgxpool.Pool
	bin   string
	dir   string
	env   map[string]string
	start time.Time

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

	notes            []string // what the driver could not do, for the report
	counts           map[string]int
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

func runSchedule(t *testing.T, sched *soak.Schedule, gen *soak.GeneratorConfig) {
	dbURL := dbtest.URL(t)
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
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &runner{
		t: t, seed: sched.Seed, ctx: ctx, db: db, bin: proctest.Binary(t), dir: t.TempDir(),
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
		counts: map[string]int{},
		obs:    soak.Observations{Subscriptions: map[string]*soak.ObservedSubscription{}},
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
	all := append(soak.CheckAll(d), r.driverViolations...)
	all = append(all, billViolations(bills)...)
	all = append(all, r.selfAudit(clock.Now, d.Now)...)
	expViolations, treated := r.experimentViolations()
	all = append(all, expViolations...)
	var violations []soak.Violation
	known := map[string]int{}
	for _, v := range all {
		if v.Known != "" && !*strictFlag {
			known[v.Known]++
			t.Logf("known defect, not failing: %s", v)
			continue
		}
		violations = append(violations, v)
	}
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
		"charges_in_treatment_arms": treated,
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
		return
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
	if !step.Twice {
		return r.request(step.Node, http.MethodPost, path, r.idem(step, ""), body, 120*time.Second)
	}
	var wg sync.WaitGroup
	var answers [2]answer
	var oks [2]bool
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], oks[i] = r.request(step.Node+i, http.MethodPost, path, r.idem(step, ""), body, 120*time.Second)
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

// execute launches steps in order: up to the schedule's window at once,
// each subscription's steps one after another, barriers alone.
func (r *runner) execute(next func() (soak.Step, bool), sched *soak.Schedule) {
	pace, _ := time.ParseDuration(sched.Pace)
	window := max(1, sched.Window)
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	last := map[int]chan struct{}{}
	for {
		step, ok := next()
		if !ok {
			break
		}
		r.counts[step.Kind]++
		switch {
		case step.Kind == soak.KindWait:
			d, _ := time.ParseDuration(step.Wait)
			time.Sleep(d)
			continue
		case step.Barrier():
			wg.Wait()
			r.run(step)
			continue
		}
		var prev chan struct{}
		done := make(chan struct{})
		if lane := step.Sub + 100000*step.Enr; lane > 0 {
			prev = last[lane]
			last[lane] = done
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer close(done)
			if prev != nil {
				<-prev
			}
			r.run(step)
		}()
		time.Sleep(pace)
	}
	wg.Wait()
}

func (r *runner) idem(step soak.Step, part string) string {
	return fmt.Sprintf("soak-%d-%d%s", r.seed, step.N, part)
}

func (r *runner) subID(step soak.Step) (string, bool) {
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	id, ok := r.subIDs[step.Sub]
	return id, ok
}

func (r *runner) observed(id string) *soak.ObservedSubscription {
	return r.obs.Subscriptions[id]
}

type subscriptionAnswer struct {
	ID            string    `json:"id"`
	Status        string    `json:"status"`
	BillingAnchor time.Time `json:"billing_anchor"`
	Pause         *struct {
		PausedAt time.Time  `json:"paused_at"`
		ResumeAt *time.Time `json:"resume_at"`
	} `json:"pause"`
}

const expYear = 2150

// run executes one step.
func (r *runner) run(step soak.Step) {
	switch step.Kind {
	case soak.KindCreate:
		r.create(step)
	case soak.KindPause, soak.KindResume, soak.KindCancel, soak.KindCard:
		r.subscriptionAction(step)
	case soak.KindClock:
		r.advance(step.Node, step.Advance, r.idem(step, ""))
	case soak.KindFault:
		body := map[string]any{}
		if step.Down != nil {
			body["down"] = *step.Down
		}
		if step.LatencyMS != nil {
			body["latency_ms"] = *step.LatencyMS
		}
		if step.ErrorRate != nil {
			body["error_rate"] = *step.ErrorRate
		}
		if a, ok := r.request(step.Node, http.MethodPost, "/v1/dev/gateways/"+step.Gateway+"/faults", r.idem(step, ""), body, 60*time.Second); !ok || a.status != 200 {
			r.note("step %d: faults on %s: %d %s", step.N, step.Gateway, a.status, a.body)
		}
	case soak.KindKill:
		r.nodesMu.Lock()
		p, other := r.nodes[step.Node], r.nodes[1-step.Node]
		if p == nil || p.Exited() || other == nil || other.Exited() {
			r.nodesMu.Unlock()
			return // never the last node alive
		}
		r.nodes[step.Node] = nil
		r.old = append(r.old, p)
		r.kills++
		r.nodesMu.Unlock()
		_ = p.Kill()
	case soak.KindRestart:
		r.nodesMu.Lock()
		p := r.nodes[step.Node]
		r.nodesMu.Unlock()
		if p != nil && !p.Exited() {
			return
		}
		if err := r.startNode(step.Node); err != nil {
			r.note("step %d: restart node %d: %v", step.N, step.Node, err)
		}
	case soak.KindTerminate:
		var n int
		err := r.db.QueryRow(r.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'rebill-soak'`).Scan(&n)
		if err != nil {
			r.note("step %d: terminate: %v", step.N, err)
		}
	case soak.KindSupport:
		r.support(step)
	case soak.KindSettle:
		r.waitQuiet(90 * time.Second)
	case soak.KindEnrol, soak.KindBill, soak.KindWithdraw, soak.KindEnrolAction, soak.KindEnrolCard, soak.KindRegistryFault, soak.KindClockTo,
		soak.KindPaidElsewhere:
		r.runAutopay(step)
	}
}

func (r *runner) advance(node int, by, idem string) {
	before := r.devNow
	sent := time.Now()
	a, ok := r.request(node, http.MethodPost, "/v1/dev/clock", idem, map[string]any{"advance": by}, 120*time.Second)
	var out struct {
		Now time.Time `json:"now"`
	}
	if !ok || a.status != 200 || a.decode(&out) != nil {
		r.note("clock +%s: %d %s", by, a.status, a.body)
		return
	}
	r.obsMu.Lock()
	r.obs.ClockMoves = append(r.obs.ClockMoves, soak.ClockMove{When: soak.Interval{Sent: sent, Answered: time.Now()}, From: before, To: out.Now})
	r.devNow = out.Now
	r.obsMu.Unlock()
}

func cardBody(c soak.Card) map[string]any {
	return map[string]any{"gateway": c.Gateway, "token": c.Token, "exp_month": 12, "exp_year": expYear}
}

func (r *runner) create(step soak.Step) {
	r.obsMu.Lock()
	now := r.devNow
	r.obsMu.Unlock()
	body := map[string]any{
		"customer_id": fmt.Sprintf("cust-%d", step.Sub), "amount": step.Amount, "currency": "USD",
		"interval": step.Interval, "interval_count": step.Count, "timezone": step.Zone,
		"payment_method": cardBody(*step.Card),
	}
	if step.AnchorIn != "" {
		d, _ := time.ParseDuration(step.AnchorIn)
		anchor := now.Add(d)
		if step.MonthEnd {
			loc, _ := time.LoadLocation(step.Zone)
			l := anchor.In(loc)
			last := time.Date(l.Year(), l.Month()+1, 0, l.Hour(), l.Minute(), l.Second(), 0, loc)
			anchor = last
		}
		body["billing_anchor"] = anchor.UTC().Format(time.RFC3339)
	}
	sent := time.Now()
	a, ok := r.post(step, "/v1/subscriptions", body)
	var sub subscriptionAnswer
	if !ok || a.status != http.StatusCreated || a.decode(&sub) != nil {
		r.note("step %d: create: %d %s", step.N, a.status, a.body)
		return
	}
	answered := time.Now()
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	r.subIDs[step.Sub] = sub.ID
	r.cards[step.Sub] = *step.Card
	r.obs.Subscriptions[sub.ID] = &soak.ObservedSubscription{
		Created: soak.Interval{Sent: sent, Answered: answered},
		Anchor:  sub.BillingAnchor,
		Cards: []soak.ObservedCard{{Gateway: step.Card.Gateway, Token: step.Card.Token, Last4: soak.Last4(step.Card.Token),
			Good: soak.GoodToken(step.Card.Token), When: soak.Interval{Sent: sent, Answered: answered}, StatusAfter: sub.Status}},
	}
}

func (r *runner) subscriptionAction(step soak.Step) {
	id, ok := r.subID(step)
	if !ok {
		return // its create did not succeed
	}
	var path string
	body := map[string]any{}
	switch step.Kind {
	case soak.KindPause:
		path = "/pause"
		if step.ResumeIn != "" {
			d, _ := time.ParseDuration(step.ResumeIn)
			r.obsMu.Lock()
			body["resume_at"] = r.devNow.Add(d).UTC().Format(time.RFC3339)
			r.obsMu.Unlock()
		}
	case soak.KindResume:
		path = "/resume"
	case soak.KindCancel:
		path = "/cancel"
		if step.AtPeriodEnd {
			body["at_period_end"] = true
		}
	case soak.KindCard:
		path = "/payment-method"
		body = cardBody(*step.Card)
	}
	sent := time.Now()
	a, ok := r.post(step, "/v1/subscriptions/"+id+path, body)
	answered := time.Now()
	when := soak.Interval{Sent: sent, Answered: answered}
	if !ok {
		r.note("step %d: %s %s: no definite answer (%d %s)", step.N, step.Kind, id, a.status, a.body)
		if step.Kind == soak.KindCard {
			r.obsMu.Lock()
			o := r.observed(id)
			o.Cards = append(o.Cards, soak.ObservedCard{Gateway: step.Card.Gateway, Token: step.Card.Token,
				Last4: soak.Last4(step.Card.Token), Good: soak.GoodToken(step.Card.Token), Unsure: true, When: when})
			r.obsMu.Unlock()
		}
		return
	}
	if a.status != http.StatusOK {
		return // a business refusal (409, 400): nothing happened
	}
	var sub subscriptionAnswer
	if err := a.decode(&sub); err != nil {
		r.note("step %d: %s: %v", step.N, step.Kind, err)
		return
	}
	var snapshot map[string]soak.ChargeState
	var read time.Time
	if step.Kind == soak.KindCancel && !step.AtPeriodEnd && sub.Status == "cancelled" {
		snapshot, read = r.chargeStates(id)
	}
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	o := r.observed(id)
	switch step.Kind {
	case soak.KindPause:
		if sub.Pause != nil {
			o.Pauses = append(o.Pauses, soak.ObservedPause{When: when, At: sub.Pause.PausedAt, ResumeAt: sub.Pause.ResumeAt})
		}
	case soak.KindResume:
		o.Resumes = append(o.Resumes, soak.ObservedResume{When: when, BillingAnchor: sub.BillingAnchor})
	case soak.KindCancel:
		if snapshot != nil {
			o.Cancels = append(o.Cancels, soak.ObservedCancel{When: when, Charges: snapshot, Read: read})
		}
	case soak.KindCard:
		same := r.cards[step.Sub] == *step.Card
		o.Cards = append(o.Cards, soak.ObservedCard{Gateway: step.Card.Gateway, Token: step.Card.Token,
			Last4: soak.Last4(step.Card.Token), Good: soak.GoodToken(step.Card.Token), Same: same, When: when, StatusAfter: sub.Status})
		r.cards[step.Sub] = *step.Card
	}
}

// chargeStates reads a subscription's charges from the database, right
// after a cancel answered.
func (r *runner) chargeStates(id string) (map[string]soak.ChargeState, time.Time) {
	out := map[string]soak.ChargeState{}
	for try := 0; try < 20; try++ {
		rows, err := r.db.Query(r.ctx, `SELECT subscription_id::text || ':' || period_key, status, attempt_count,
			coalesce(unknown_phase, '') FROM charges WHERE subscription_id = $1`, id)
		if err == nil {
			for rows.Next() {
				var s soak.ChargeState
				if err = rows.Scan(&s.Key, &s.Status, &s.Attempt, &s.UnknownPhase); err != nil {
					break
				}
				out[s.Key] = s
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err == nil {
			return out, time.Now()
		}
		out = map[string]soak.ChargeState{}
		time.Sleep(50 * time.Millisecond) // a terminated connection: read again
	}
	r.note("charges of %s after its cancel could not be read", id)
	return nil, time.Time{}
}

// support is a person working the review queue: resolve a charge with the
// gateway's evidence (succeeded only when the gateway shows a capture), or
// retry it.
func (r *runner) support(step soak.Step) {
	a, ok := r.request(step.Node, http.MethodGet, "/v1/review-queue?limit=100", "", nil, 20*time.Second)
	if !ok || a.status != 200 {
		return
	}
	var list struct {
		Data []struct {
			ID             string `json:"id"`
			SubscriptionID string `json:"subscription_id"`
			Key            string `json:"key"`
			Status         string `json:"status"`
		} `json:"data"`
	}
	if a.decode(&list) != nil {
		return
	}
	var review []int
	for i, c := range list.Data {
		if c.Status == "requires_review" {
			review = append(review, i)
		}
	}
	if len(review) == 0 {
		return
	}
	c := list.Data[review[step.Pick%len(review)]]
	sent := time.Now()
	switch step.Action {
	case "resolve":
		var captures int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM gatewaysim.operations
			WHERE charge_key = $1 AND op = 'capture' AND status = 'succeeded'`, c.Key).Scan(&captures); err != nil {
			return
		}
		outcome, evidence := "failed", "the gateways' ledgers show no capture of "+c.Key
		if captures > 0 {
			outcome, evidence = "succeeded", "the gateway's ledger shows the capture of "+c.Key
		}
		a, ok := r.request(step.Node, http.MethodPost, "/v1/charges/"+c.ID+"/resolve", r.idem(step, ""),
			map[string]any{"outcome": outcome, "evidence": evidence}, 20*time.Second)
		if ok && a.status == 200 {
			r.obsMu.Lock()
			if o := r.observed(c.SubscriptionID); o != nil {
				o.Resolves = append(o.Resolves, soak.ObservedResolve{ChargeID: c.ID, Outcome: outcome,
					When: soak.Interval{Sent: sent, Answered: time.Now()}, Clock: r.devNow})
			}
			r.obsMu.Unlock()
		}
	case "retry":
		r.request(step.Node, http.MethodPost, "/v1/charges/"+c.ID+"/retry", r.idem(step, ""), map[string]any{}, 20*time.Second)
	}
}

// sampleUnpaid records, every 250 ms, when each unpaid subscription's
// dunning ended (unpaid_since: the API does not show it). It returns the
// function that stops it after one last reading.
func (r *runner) sampleUnpaid() func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	read := func() {
		rows, err := r.db.Query(r.ctx, `SELECT id::text, unpaid_since FROM subscriptions WHERE unpaid_since IS NOT NULL`)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var since time.Time
			if rows.Scan(&id, &since) != nil {
				return
			}
			r.obsMu.Lock()
			if o := r.observed(id); o != nil {
				if n := len(o.UnpaidSince); n == 0 || !o.UnpaidSince[n-1].Equal(since) {
					o.UnpaidSince = append(o.UnpaidSince, since.UTC())
				}
			}
			r.obsMu.Unlock()
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				read()
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// drain ends the chaos and lets everything settle: faults off, every node
// up, unanswered requests answered, the clock moved a day at a time past
// every dunning schedule, then quiet.
func (r *runner) drain() {
	for i := 1; i <= 5; i++ {
		gw := fmt.Sprintf("sim%d", i)
		r.request(0, http.MethodPost, "/v1/dev/gateways/"+gw+"/faults", fmt.Sprintf("soak-%d-drain-%s", r.seed, gw),
			map[string]any{"down": false, "latency_ms": 0, "error_rate": 0}, 120*time.Second)
	}
	for _, gw := range []string{"gmp1", "gmp2"} {
		r.request(0, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", fmt.Sprintf("soak-%d-drain-%s", r.seed, gw),
			map[string]any{"down": false, "error_rate": 0, "lose_response": false, "processing": 0, "annul_unanswered": false},
			120*time.Second)
	}
	for i := range r.nodes {
		r.nodesMu.Lock()
		p := r.nodes[i]
		r.nodesMu.Unlock()
		if p == nil || p.Exited() {
			if err := r.startNode(i); err != nil {
				r.t.Fatalf("restart node %d to settle: %v", i, err)
			}
		}
	}
	t0 := time.Now()
	r.waitQuiet(45 * time.Second)
	took := []string{time.Since(t0).Round(time.Millisecond).String()}
	// Past every dunning schedule (7 days from the first decline), three
	// days at a time: the attempts that fall due within one move run one
	// after another.
	for i := 0; i < 3; i++ {
		t0 = time.Now()
		r.advance(i%2, "72h0m7s", fmt.Sprintf("soak-%d-drain-%d", r.seed, i))
		r.waitQuiet(20 * time.Second)
		took = append(took, time.Since(t0).Round(time.Millisecond).String())
	}
	r.t.Logf("drain: quiet after %s", strings.Join(took, ", "))
	if !r.waitQuiet(60 * time.Second) {
		r.note("not quiet 60s after the last drain move: %s; %s", r.openWork(), r.openCharges())
	}
}

// openWorkSQL counts what is in flight or due. A bill's charge waiting
// for the customer's confirmation (scheduled, confirmation_required) or
// for a dunning attempt ahead of the clock, or in review, is settled for
// now; everything else about bills is counted until it is done: a
// scheduled bill due and not yet charged, a paying bill whose charge
// moves or has settled without its bill following, a copy waiting for
// the identity its paying charge may release, a bill past its expires_at
// not yet expired, a posting not yet answered (or abandoned, its job still
// asking the registry), an accepted posting the
// registry sweep must annul (the sweep's own condition), and the
// registry's jobs.
const openWorkSQL = `SELECT
	(SELECT count(*) FROM charges WHERE status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown')
		AND NOT (status = 'scheduled' AND confirmation_required)),
	(SELECT count(*) FROM charges WHERE status = 'declined' AND next_attempt_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM subscriptions WHERE next_charge_at <= (SELECT now FROM dev_clock)
		AND (status IN ('active', 'past_due') OR (status = 'paused' AND cancel_at_period_end))),
	(SELECT count(*) FROM subscriptions WHERE status = 'paused' AND resume_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM river_job WHERE (kind LIKE 'charge%' OR kind IN ('registry_post', 'registry_annul'))
		AND state IN ('available', 'running', 'retryable', 'scheduled', 'pending')),
	(SELECT count(*) FROM bills b JOIN enrollments e ON e.id = b.enrollment_id
		WHERE b.status = 'scheduled' AND b.pay_at <= (SELECT now FROM dev_clock) AND e.status = 'active'),
	(SELECT count(*) FROM bills b LEFT JOIN charges c ON c.id = b.charge_id WHERE b.status = 'paying'
		AND (c.id IS NULL OR NOT (c.status = 'requires_review' OR (c.status = 'scheduled' AND c.confirmation_required)
			OR (c.status = 'declined' AND c.next_attempt_at > (SELECT now FROM dev_clock))))),
	(SELECT count(*) FROM charges c WHERE c.identity_held AND (c.status = 'voided' OR (c.status = 'failed'
		AND (c.hold_released_at IS NOT NULL OR (c.authorized_at IS NULL AND c.review_reason IS NULL))
		AND EXISTS (SELECT 1 FROM bills o JOIN enrollments oe ON oe.id = o.enrollment_id
			WHERE o.identity = c.bill_identity AND o.status = 'duplicate' AND o.charge_id IS NULL AND oe.status <> 'cancelled')))
		AND NOT EXISTS (SELECT 1 FROM registry_postings p
			WHERE (p.charge_id = c.id OR p.uin = c.registry_uin) AND p.status IN ('posting', 'accepted', 'abandoned'))),
	(SELECT count(*) FROM bills WHERE status IN ('pending', 'awaiting_confirmation', 'awaiting_registry', 'scheduled', 'failed')
		AND expires_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM registry_postings WHERE status IN ('posting', 'abandoned')),
	(SELECT count(*) FROM registry_postings p JOIN charges c ON c.id = p.charge_id WHERE p.status = 'accepted'
		AND (c.attempt_count > p.attempt OR c.status IN ('voided', 'declined')
			OR (c.status IN ('requires_review', 'failed') AND c.hold_released_at IS NOT NULL))),
	(SELECT count(*) FROM velocity_counters v CROSS JOIN unnest(v.slots) AS s(holder) WHERE v.name = 'declines'
		AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.id::text || '/' || c.attempt_count = s.holder
			AND c.status IN ('authorizing', 'unknown')))`

func (r *runner) openWork() string {
	var inflight, overdue, due, resumes, jobs, billsDue, paying, releases, expiries, posting, annulments, slots int
	if err := r.db.QueryRow(r.ctx, openWorkSQL).Scan(&inflight, &overdue, &due, &resumes, &jobs, &billsDue, &paying, &releases,
		&expiries, &posting, &annulments, &slots); err != nil {
		return "unknown: " + err.Error()
	}
	if inflight+overdue+due+resumes+jobs+billsDue+paying+releases+expiries+posting+annulments+slots == 0 {
		return ""
	}
	return fmt.Sprintf("%d charges in flight, %d dunning attempts overdue, %d subscriptions due, %d resumes due, %d charge and registry jobs pending, "+
		"%d bills due, %d bills paying, %d bill identities to release, %d bills to expire, %d postings in flight, %d postings to annul, "+
		"%d declines slots of ended attempts",
		inflight, overdue, due, resumes, jobs, billsDue, paying, releases, expiries, posting, annulments, slots)
}

// openCharges describes charges still in flight and their River jobs.
func (r *runner) openCharges() string {
	rows, err := r.db.Query(r.ctx, `SELECT c.id::text, c.status, c.attempt_count, coalesce(c.unknown_phase, ''),
		coalesce(c.failure_code, ''), c.next_attempt_at, coalesce((SELECT string_agg(j.kind || '/a' || (j.args->>'attempt') || ':' || j.state || '#' || j.attempt, ' ')
			FROM river_job j WHERE j.args->>'charge_id' = c.id::text), '')
		FROM charges c WHERE c.status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown') ORDER BY c.id LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var id, status, phase, code, jobs string
		var attempt int
		var next *time.Time
		if err := rows.Scan(&id, &status, &attempt, &phase, &code, &next, &jobs); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("charge %s %s a%d phase=%q code=%q next=%v jobs=[%s]", id, status, attempt, phase, code, next, jobs))
	}
	return strings.Join(parts, "; ")
}

// waitQuiet waits until nothing is in flight or due (twice in a row).
func (r *runner) waitQuiet(limit time.Duration) bool {
	start := time.Now()
	deadline := start.Add(limit)
	quiet := 0
	open := ""
	lastLog := start
	for time.Now().Before(deadline) {
		if *verboseFlag && time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			r.t.Logf("waiting for quiet: %s; %s", open, r.openCharges())
		}
		if open = r.openWork(); open == "" {
			quiet++
			if quiet == 2 {
				return true
			}
		} else {
			quiet = 0
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.t.Logf("not quiet after %s: %s; %s", limit, open, r.openCharges())
	return false
}

// collect reads what the invariants judge: every subscription the schedule
// created (API), its events (API), its charges (database: the period start
// and a few fields the API does not show), and the gateways' ledgers (API).
func (r *runner) collect() *soak.Data {
	t := r.t
	var clock struct {
		Now time.Time `json:"now"`
	}
	if a, ok := r.request(0, http.MethodGet, "/v1/dev/clock", "", nil, 60*time.Second); !ok || a.decode(&clock) != nil {
		t.Fatalf("read the clock: %d %s", a.status, a.body)
	}
	d := &soak.Data{Now: clock.Now, Observed: &r.obs}
	var ids []string
	for _, id := range r.subIDs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a, ok := r.request(0, http.MethodGet, "/v1/subscriptions/"+id, "", nil, 60*time.Second)
		var s struct {
			ID                string     `json:"id"`
			CustomerID        string     `json:"customer_id"`
			Status            string     `json:"status"`
			Amount            int64      `json:"amount"`
			Currency          string     `json:"currency"`
			Interval          string     `json:"interval"`
			IntervalCount     int        `json:"interval_count"`
			TimeZone          string     `json:"timezone"`
			BillingAnchor     time.Time  `json:"billing_anchor"`
			CancelAtPeriodEnd bool       `json:"cancel_at_period_end"`
			CancelledAt       *time.Time `json:"cancelled_at"`
			CreatedAt         time.Time  `json:"created_at"`
		}
		if !ok || a.status != 200 || a.decode(&s) != nil {
			t.Fatalf("read subscription %s: %d %s", id, a.status, a.body)
		}
		sub := soak.Subscription{ID: s.ID, CustomerID: s.CustomerID, Status: s.Status, Amount: s.Amount, Currency: s.Currency,
			Interval: s.Interval, IntervalCount: s.IntervalCount, TimeZone: s.TimeZone, BillingAnchor: s.BillingAnchor,
			CancelAtPeriodEnd: s.CancelAtPeriodEnd, CancelledAt: s.CancelledAt, CreatedAt: s.CreatedAt}
		cursor := ""
		for {
			path := "/v1/subscriptions/" + id + "/events?limit=100"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			a, ok := r.request(0, http.MethodGet, path, "", nil, 60*time.Second)
			var page struct {
				Data []struct {
					ID    int64   `json:"id"`
					Type  string  `json:"type"`
					From  *string `json:"from_status"`
					To    string  `json:"to_status"`
					Actor struct {
						ID   string `json:"id"`
						Role string `json:"role"`
					} `json:"actor"`
					At time.Time `json:"at"`
				} `json:"data"`
				NextCursor *string `json:"next_cursor"`
			}
			if !ok || a.status != 200 || a.decode(&page) != nil {
				t.Fatalf("read events of %s: %d %s", id, a.status, a.body)
			}
			for _, e := range page.Data {
				from := ""
				if e.From != nil {
					from = *e.From
				}
				sub.Events = append(sub.Events, soak.Event{ID: e.ID, Type: e.Type, From: from, To: e.To,
					ActorID: e.Actor.ID, ActorRole: e.Actor.Role, At: e.At})
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		d.Subscriptions = append(d.Subscriptions, sub)
	}
	byID := map[string]*soak.Subscription{}
	for i := range d.Subscriptions {
		byID[d.Subscriptions[i].ID] = &d.Subscriptions[i]
	}
	rows, err := r.db.Query(r.ctx, `SELECT id::text, subscription_id::text, period_key, period_start, amount, currency, gateway,
		status, attempt_count, next_attempt_at, coalesce(failure_code, ''), coalesce(review_reason, ''),
		coalesce(unknown_phase, ''), coalesce(resolution, '') FROM charges WHERE subscription_id IS NOT NULL
		ORDER BY period_start, id`)
	if err != nil {
		t.Fatalf("read charges: %v", err)
	}
	for rows.Next() {
		var c soak.Charge
		if err := rows.Scan(&c.ID, &c.SubscriptionID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency, &c.Gateway,
			&c.Status, &c.AttemptCount, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.UnknownPhase, &c.Resolution); err != nil {
			t.Fatalf("read charges: %v", err)
		}
		c.PeriodStart = c.PeriodStart.UTC()
		c.Key = c.SubscriptionID + ":" + c.PeriodKey
		if s := byID[c.SubscriptionID]; s != nil {
			s.Charges = append(s.Charges, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("read charges: %v", err)
	}
	slots, err := r.db.Query(r.ctx, `SELECT customer_id, unnest(slots) FROM velocity_counters WHERE name = 'declines' ORDER BY 1, 2`)
	if err != nil {
		t.Fatalf("read velocity slots: %v", err)
	}
	var slot soak.Slot
	if _, err := pgx.ForEachRow(slots, []any{&slot.Customer, &slot.Holder}, func() error {
		d.Slots = append(d.Slots, slot)
		return nil
	}); err != nil {
		t.Fatalf("read velocity slots: %v", err)
	}
	for i := 1; i <= 5; i++ {
		gw := fmt.Sprintf("sim%d", i)
		a, ok := r.request(0, http.MethodGet, "/v1/dev/gateways/"+gw+"/ledger", "", nil, 60*time.Second)
		var page struct {
			Data []struct {
				Op             string    `json:"op"`
				IdempotencyKey string    `json:"idempotency_key"`
				Reference      string    `json:"reference"`
				TokenLast4     string    `json:"token_last4"`
				Amount         int64     `json:"amount"`
				Currency       string    `json:"currency"`
				Status         string    `json:"status"`
				DeclineCode    string    `json:"decline_code"`
				At             time.Time `json:"received_at"` // real time, as the soak's requests; at is the dev clock
			} `json:"data"`
		}
		if !ok || a.status != 200 || a.decode(&page) != nil {
			t.Fatalf("read the ledger of %s: %d", gw, a.status)
		}
		for _, o := range page.Data {
			d.Ledger = append(d.Ledger, soak.LedgerOp{Gateway: gw, Op: o.Op, IdempotencyKey: o.IdempotencyKey, Reference: o.Reference,
				TokenLast4: o.TokenLast4, Amount: o.Amount, Currency: o.Currency, Status: o.Status, DeclineCode: o.DeclineCode, At: o.At})
		}
	}
	return d
}
