package usecases_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// TestModel is a model-based test of the subscription and charge state
// machines. rapid generates sequences of everything that
// can happen to subscriptions: customers create them (daily, weekly,
// monthly; anchored now or ahead), pause them (with or without a resume
// date), resume, cancel (now or at period end) and change cards (the same
// or another); the clock moves by a minute to weeks; the scan runs;
// River's charge jobs run one at a time in an order rapid chooses, against
// a fake gateway whose answers rapid chooses per step (approve, soft, hard
// or stolen-card decline, 503, timeout before or after acting, worker
// crash before or after acting, faulty lookups), while a customer's
// request may commit in the middle of a gateway call; River runs again a
// job it had completed (a crash after the step committed); and support
// resolves charges in review with the provider's evidence, or retries
// them.
//
// The real stores, use cases (usecases.Service), scan (renewals.Renewals)
// and pipeline (charges.Pipeline, through its River workers) run on one
// PostgreSQL database (world). Beside them runs a reference model in plain
// Go, written from the contract (api/openapi.json, "Decisions"): which
// periods are owed and must have a charge, and what a subscription looks
// like after each customer action and scan. After every action (and every
// job) check judges the invariants: at most one capture per period at the
// gateway, each of a hold of its own attempt; no capture first sent after
// the subscription's cancel committed; every authorization carries the
// card current when its attempt started; every charge and subscription
// move is allowed by its state machine, and each subscription move has
// exactly one event; no charge is stranded without a job; the database
// agrees with the model. At the end (settle) the faults are cleared, time
// moves through dunning and every wait, the jobs drain with good answers,
// and final judges the end state: every charge paid once, failed for
// good, voided for a reason the contract gives, or in review with a
// reason; every capture belongs to a paid (or reviewed) charge; no hold is
// left behind outside review.
//
// Findings are written out as plain tests in model_regression_test.go.
//
// A failure prints the shrunk sequence of actions. Run longer with
// -rapid.checks=N (default here 50) and -rapid.steps=N (average actions
// per check, default here 60); -rapid.shrinktime=5m shrinks further than
// rapid's 30s; -rapid.seed=N replays a run.
func TestModel(t *testing.T) {
	setDefault(t, "rapid.checks", "RAPID_CHECKS", 50)
	setDefault(t, "rapid.steps", "RAPID_STEPS", 60)
	w := newWorld(t)
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		if err := w.reset(ctx); err != nil {
			rt.Fatal(err)
		}
		// Both ways of running a capture: in a job of its own, where
		// events interleave between hold and capture, and in the hold's
		// run, as production does.
		w.pipeline.CaptureInline = rapid.Bool().Draw(rt, "captureInline")
		m := newMachine(ctx, w)
		rt.Repeat(m.actions())
		m.settle(rt)
		w.stats["checks"]++
	})
	if testing.Verbose() {
		w.logStats(t)
	}
}

// setDefault sets one of rapid's flags for this test (fewer checks than
// rapid's 100 for the normal suite, longer sequences), unless the command
// line or the environment asks for a value.
func setDefault(t *testing.T, name, env string, n int) {
	t.Helper()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if _, inEnv := os.LookupEnv(env); set || inEnv {
		return
	}
	if err := flag.Set(name, fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
}

// Tokens a customer may hold. A subscription starts with one and may
// change to another or send the same again.
var modelTokens = []string{"tok_1", "tok_2", "tok_3"}

// modelSub is the reference model of one subscription: what the contract
// says it is, and which of its periods must have a charge.
type modelSub struct {
	index    int
	id       uuid.UUID
	interval period.Interval
	token    string
	status   subscriptions.Status
	checked  subscriptions.Status // the status the last check saw
	// The period grid: periods start at anchor + n intervals; next is the
	// first period not yet billed.
	anchor            time.Time
	next              int
	resumed           bool // the grid was anchored at a resume
	cancelAtPeriodEnd bool
	resumeAt          *time.Time
	// The pause: when it began, what its resume does, and the time a
	// pause that continues its period keeps (nil otherwise).
	pausedAt time.Time
	onResume subscriptions.OnResume
	kept     *time.Duration
	// resumedToCancel: the last scan resumed it and carried out its
	// scheduled cancel at once.
	resumedToCancel bool
	cancelledAt     *time.Time
	cancelSeq       int // the gateway's call counter when the cancel committed
	// owed: every period that must have a charge, by period key.
	owed map[string]time.Time
	// unpaidSince lists the starts of the subscription's unpaid spans:
	// periods that begin at or after one while it is unpaid are not owed.
	unpaidSince []time.Time
}

func (s *modelSub) sched() period.Schedule {
	return period.Schedule{Anchor: s.anchor, Location: time.UTC, Interval: s.interval, Count: 1}
}

func (s *modelSub) nextChargeAt() time.Time { return s.sched().Start(s.next) }

func (s *modelSub) String() string { return fmt.Sprintf("s%d", s.index) }

// keep records the pause's on_resume: continue_period keeps the time from
// pausedAt to the next charge (decision 4).
func (s *modelSub) keep(onResume subscriptions.OnResume, pausedAt time.Time) {
	s.onResume, s.kept = onResume, nil
	if onResume == subscriptions.ContinuePeriod {
		s.kept = new(max(s.nextChargeAt().Sub(pausedAt), 0))
	}
}

func billable(st subscriptions.Status) bool {
	return st == subscriptions.Active || st == subscriptions.PastDue
}

// skipStarted moves the next period past every period that has begun by
// now: those began while unpaid, and are not owed.
func (s *modelSub) skipStarted(now time.Time) {
	if cur := s.sched().IndexAt(now); cur >= s.next {
		s.next = cur + 1
	}
}

type machine struct {
	ctx  context.Context
	w    *world
	subs []*modelSub
	byID map[uuid.UUID]*modelSub
	// What the checks have read so far.
	lastChargeMove, lastSubMove, lastEvent int64
	// kind of the running action: which subscription moves it may cause.
	pipelineMay bool
	// after applies to the model a request that ran meanwhile, once the
	// job is done.
	after func(*rapid.T)
	// status of every charge as last seen, for readable logs.
	seen map[uuid.UUID]string
}

func newMachine(ctx context.Context, w *world) *machine {
	m := &machine{ctx: ctx, w: w, byID: map[uuid.UUID]*modelSub{}, seen: map[uuid.UUID]string{}}
	w.gw.setModel(m)
	return m
}

// The fake gateway's hooks for the model, and the world's for its
// actions.

func (g *fakeGateway) setModel(m gatewayModel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.model = m
}

// now is the provider's call counter: the model notes it when a cancel
// commits, to tell captures sent before it from captures sent after.
func (g *fakeGateway) now() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}

// setMeanwhile arms fn for the next call (see fakeGateway.meanwhile).
func (g *fakeGateway) setMeanwhile(fn func(seq int)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.meanwhile = fn
}

// redeliver makes a job River completed runnable again: its process died
// after the step committed and before River recorded the job completed,
// and River runs it again.
func (w *world) redeliver(ctx context.Context, id int64) error {
	_, err := w.pool.Exec(ctx, `UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = $2
		WHERE id = $1`, id, w.clock.Now())
	return err
}

// completed lists the charge jobs River completed, in the order of
// runnable.
func (w *world) completed(ctx context.Context, subIndex map[uuid.UUID]int) ([]pendingJob, error) {
	return w.jobs(ctx, subIndex, `j.state = 'completed'`)
}

// logStats prints what the checks reached: actions, charge and
// subscription moves, gateway answers.
func (w *world) logStats(t *testing.T) {
	keys := make([]string, 0, len(w.stats))
	for k := range w.stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-45s %6d", k, w.stats[k])
	}
	t.Logf("reached:%s", b.String())
}

// currentToken and cancelledAt answer the fake gateway (gatewayModel).
func (m *machine) currentToken(chargeKey string) string {
	if s := m.subOfKey(chargeKey); s != nil {
		return s.token
	}
	return ""
}

func (m *machine) cancelledAt(chargeKey string) (int, bool) {
	if s := m.subOfKey(chargeKey); s != nil && s.status == subscriptions.Cancelled {
		return s.cancelSeq, true
	}
	return 0, false
}

func (m *machine) subOfKey(chargeKey string) *modelSub {
	id, err := uuid.Parse(strings.SplitN(chargeKey, ":", 2)[0])
	if err != nil {
		return nil
	}
	return m.byID[id]
}

func (m *machine) now() time.Time { return m.w.clock.Now() }

// weighted is an action, how often it is drawn, and whether it can run
// in the present state (an action never skips after drawing: rapid would
// count the whole sequence as invalid; a disabled one does nothing).
type weighted struct {
	name    string
	weight  int
	enabled func() bool
	run     func(*rapid.T)
}

// actions is the state machine for rapid.T.Repeat: one step draws an
// action by weight (the pipeline's jobs most often, cancels
// rarely, so that subscriptions live long enough to meet trouble).
func (m *machine) actions() map[string]func(*rapid.T) {
	always := func() bool { return true }
	anySub := func() bool { return len(m.subs) > 0 }
	table := []weighted{
		{"run jobs", 30, m.anyJob, m.runJobs},
		{"advance", 12, always, m.advance},
		{"scan", 12, always, m.scan},
		{"create", 6, m.mayCreate, m.create},
		{"pause", 6, anySub, m.pause},
		{"resume", 6, anySub, m.resume},
		{"change card", 7, anySub, m.changeCard},
		{"cancel at period end", 4, anySub, m.cancelAtPeriodEnd},
		{"cancel now", 2, anySub, m.cancelNow},
		{"resolve", 5, func() bool { return len(m.chargesIn(charges.RequiresReview)) > 0 }, m.resolve},
		{"retry", 5, func() bool { return len(m.chargesIn(charges.RequiresReview, charges.Failed)) > 0 }, m.retry},
		{"redeliver", 3, m.anyCompleted, m.redeliver},
	}
	total := 0
	for _, a := range table {
		total += a.weight
	}
	return map[string]func(*rapid.T){
		// A drawn action that cannot run does nothing, so that the same
		// draws mean the same actions when shrinking removes steps.
		"step": func(t *rapid.T) {
			n := rapid.IntRange(0, total-1).Draw(t, "action")
			for _, a := range table {
				if n -= a.weight; n < 0 {
					if a.enabled() {
						a.run(t)
						m.w.stats["action "+a.name]++
					}
					return
				}
			}
		},
		"": m.check,
	}
}

func (m *machine) mayCreate() bool {
	live := 0
	for _, s := range m.subs {
		if s.status != subscriptions.Cancelled {
			live++
		}
	}
	return live < 3 && len(m.subs) < 5
}

func (m *machine) anyJob() bool {
	jobs, err := m.w.runnable(m.ctx, m.subIndex())
	if err != nil {
		panic(err)
	}
	return len(jobs) > 0
}

// inTx runs a use case in a transaction, as the API does: an error rolls
// everything back.
func (m *machine) inTx(fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(m.ctx, m.w.pool, fn)
}

func (m *machine) pickSub(t *rapid.T) *modelSub {
	return m.subs[rapid.IntRange(0, len(m.subs)-1).Draw(t, "sub")]
}

// ---- the model's billing rules (the contract) ----

// bill charges every period of s that has begun by now, when s is billed
// at all (decisions 5, 6 and 18): the one place the model says which
// periods are owed. A cancel scheduled at period end takes effect at the
// end of the last billed period instead.
func (m *machine) bill(t *rapid.T, s *modelSub, now time.Time) { m.billAt(t, s, now, m.w.gw.now()) }

// billAt is bill by a request that committed when the gateway's call
// counter stood at seq.
func (m *machine) billAt(t *rapid.T, s *modelSub, now time.Time, seq int) {
	if !billable(s.status) || s.nextChargeAt().After(now) {
		return
	}
	if s.cancelAtPeriodEnd {
		m.cancelled(s, s.nextChargeAt(), seq)
		return
	}
	sch := s.sched()
	last := sch.IndexAt(now)
	for i := s.next; i <= last; i++ {
		p := sch.Period(i)
		if prev, taken := s.owed[p.Key]; taken && !prev.Equal(p.Start) {
			if i == 0 && s.resumed {
				// Decision 5: a resume on the day a charged period began
				// starts that period again; it is paid once.
				t.Logf("%s: the period starting %s at the resume is the period %s, which began at %s",
					s, p.Start.Format(time.RFC3339), p.Key, prev.Format(time.RFC3339))
				continue
			}
			t.Fatalf("%s: the period starting %s is owed, but its key %s already names the period starting %s: it cannot be charged",
				s, p.Start.Format(time.RFC3339), p.Key, prev.Format(time.RFC3339))
		}
		s.owed[p.Key] = p.Start
	}
	s.next = last + 1
}

// cancelled records that s was cancelled as of at; the cancel committed
// when the gateway's call counter stood at seq.
func (m *machine) cancelled(s *modelSub, at time.Time, seq int) {
	s.status = subscriptions.Cancelled
	s.cancelledAt = &at
	s.cancelAtPeriodEnd = false
	s.resumeAt = nil
	s.kept = nil
	s.cancelSeq = seq
}

// resumeAt resumes a paused s as of at (decision 5): a pause that
// continues its period restarts the grid at at plus the time kept (its
// first key is never a charged one: bill fails if it is); otherwise, once
// billing has begun a new period starts at at; before the first anchor,
// or with a cancel scheduled, the grid stands.
func (m *machine) resumeAt(s *modelSub, at time.Time) {
	keepGrid := s.cancelAtPeriodEnd || (s.next == 0 && s.anchor.After(at))
	s.status = subscriptions.Active
	s.resumeAt = nil
	if s.kept != nil {
		s.anchor, s.next, s.resumed = at.Add(*s.kept), 0, false
		s.kept = nil
		return
	}
	if !keepGrid {
		s.anchor, s.next, s.resumed = at, 0, true
	}
}

// ---- actions ----

func (m *machine) create(t *rapid.T) {
	interval := rapid.SampledFrom([]period.Interval{period.Day, period.Week, period.Month}).Draw(t, "interval")
	ahead := rapid.SampledFrom([]time.Duration{0, time.Hour, 50 * time.Hour}).Draw(t, "anchor ahead")
	token := rapid.SampledFrom(modelTokens).Draw(t, "token")
	now := m.now()
	var anchor *time.Time
	if ahead > 0 {
		anchor = new(now.Add(ahead))
	}
	var sub subscriptions.Subscription
	err := m.inTx(func(tx pgx.Tx) (err error) {
		sub, err = m.w.svc.CreateSubscription(m.ctx, tx, staff, subscriptions.New{
			CustomerID: "cust", Amount: 1000, Currency: "EUR", Interval: interval, IntervalCount: 1, TimeZone: "UTC",
			BillingAnchor: anchor, PaymentMethod: card(token),
		})
		return err
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	s := &modelSub{index: len(m.subs), id: sub.ID, interval: interval, token: token, status: subscriptions.Active, checked: subscriptions.Active,
		anchor: now.Add(ahead), owed: map[string]time.Time{}}
	m.subs = append(m.subs, s)
	m.byID[s.id] = s
	m.bill(t, s, now)
	t.Logf("%s: create %s, anchor now+%s, %s", s, interval, ahead, token)
}

func (m *machine) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour, 3 * 24 * time.Hour,
		7 * 24 * time.Hour, 16 * 24 * time.Hour}).Draw(t, "by")
	m.w.clock.Advance(d)
	t.Logf("advance %s to %s", d, m.now().Format(time.RFC3339))
}

func (m *machine) scan(t *rapid.T) {
	now := m.now()
	res, err := m.w.renewals.Scan(m.ctx, now)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	m.modelScan(t, now)
	t.Logf("scan: %+v", res)
}

// modelScan is what a scan at now does (scan.go's order: scheduled
// cancels, scheduled resumes, due periods).
func (m *machine) modelScan(t *rapid.T, now time.Time) {
	for _, s := range m.subs {
		// Decision 6: a scheduled cancel takes effect when the period
		// ends, whatever the subscription's status (a billed one's is
		// carried out with its due periods, below).
		// A pause that continues its period ends it after the resume.
		if !billable(s.status) && s.status != subscriptions.Cancelled && s.cancelAtPeriodEnd && !s.nextChargeAt().After(now) && s.kept == nil {
			m.cancelled(s, s.nextChargeAt(), m.w.gw.now())
		}
	}
	for _, s := range m.subs {
		if s.status == subscriptions.Paused && s.resumeAt != nil && !s.resumeAt.After(now) {
			m.resumeAt(s, *s.resumeAt)
			s.resumedToCancel = s.cancelAtPeriodEnd
		}
	}
	for _, s := range m.subs {
		m.bill(t, s, now)
		s.resumedToCancel = s.resumedToCancel && s.status == subscriptions.Cancelled
	}
}

// drawAnswers chooses the gateway's behaviour for one step; every choice
// shrinks towards the good answer.
func drawAnswers(t *rapid.T) answers {
	var a answers
	switch f := rapid.IntRange(0, 11).Draw(t, "money fault"); {
	case f == 6:
		a.money = faultUnavailable
	case f == 7:
		a.money = faultTimeoutBefore
	case f == 8 || f == 9:
		a.money = faultTimeoutAfter
	case f == 10:
		a.money = faultCrashBefore
	case f == 11:
		a.money = faultCrashAfter
	}
	switch v := rapid.IntRange(0, 6).Draw(t, "issuer"); v {
	case 4:
		a.verdict = verdictSoftDecline
	case 5:
		a.verdict = verdictHardDecline
	case 6:
		a.verdict = verdictStolenCard
	}
	switch f := rapid.IntRange(0, 8).Draw(t, "lookup fault"); {
	case f == 5:
		a.lookup = faultUnavailable
	case f == 6 || f == 7:
		a.lookup = faultTimeoutBefore
	case f == 8:
		a.lookup = faultCrashBefore
	}
	return a
}

func (m *machine) subIndex() map[uuid.UUID]int {
	out := map[uuid.UUID]int{}
	for _, s := range m.subs {
		out[s.id] = s.index
	}
	return out
}

func (m *machine) anyCompleted() bool {
	jobs, err := m.w.completed(m.ctx, m.subIndex())
	if err != nil {
		panic(err)
	}
	return len(jobs) > 0
}

// redeliver is River running again a job it had completed: the worker's
// process died after the step committed, before River recorded it done.
func (m *machine) redeliver(t *rapid.T) {
	jobs, err := m.w.completed(m.ctx, m.subIndex())
	if err != nil {
		t.Fatal(err)
	}
	j := jobs[rapid.IntRange(0, len(jobs)-1).Draw(t, "job")]
	if err := m.w.redeliver(m.ctx, j.id); err != nil {
		t.Fatal(err)
	}
	t.Logf("redeliver %s", j)
}

func (m *machine) runJobs(t *rapid.T) {
	jobs, err := m.w.runnable(m.ctx, m.subIndex())
	if err != nil {
		t.Fatal(err)
	}
	m.pipelineMay = true
	n := rapid.IntRange(1, 3).Draw(t, "jobs")
	for k := 0; k < n; k++ {
		if k > 0 {
			// The invariants after every job, and the model takes in the
			// job's outcome before the next one (Repeat checks the last).
			m.pipelineMay = true
			m.check(t)
			if jobs, err = m.w.runnable(m.ctx, m.subIndex()); err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				return
			}
		}
		j := jobs[rapid.IntRange(0, len(jobs)-1).Draw(t, "job")]
		a := drawAnswers(t)
		m.meanwhile(t, j)
		m.work(t, j, a)
	}
}

// meanwhile may arm a customer's request on the job's subscription that
// commits during the job's first gateway call, while it is in flight: the
// races the model is for (a card change while an authorize is in flight, a
// cancel while a capture's outcome is unknown).
func (m *machine) meanwhile(t *rapid.T, j pendingJob) {
	s := m.subs[j.subIndex]
	var a customerAction
	switch rapid.IntRange(0, 11).Draw(t, "meanwhile") {
	case 8:
		a = m.prepareCancelNow(s)
	case 9:
		a = m.prepareCancelAtPeriodEnd(s)
	case 10:
		a = m.prepareChangeCard(t, s)
	case 11:
		a = m.preparePause(t, s)
	default:
		return
	}
	var done bool
	var err error
	var seq int
	m.w.gw.setMeanwhile(func(at int) {
		done, seq, err = true, at, a.perform()
	})
	m.after = func(t *rapid.T) {
		m.w.gw.setMeanwhile(nil)
		if !done {
			return // the job made no call
		}
		t.Logf("  meanwhile, in flight: %s: %v", a.name, err)
		a.apply(t, err, seq)
	}
}

func (m *machine) work(t *rapid.T, j pendingJob, a answers) {
	m.w.gw.setPlan(a)
	out, err := m.w.runJob(m.ctx, j)
	m.w.gw.setPlan(answers{})
	if err != nil {
		t.Fatal(err)
	}
	m.pipelineMay = true // until the next check
	after := m.after
	m.after = nil
	defer func() {
		if after != nil {
			after(t)
		}
	}()
	c, err := charges.Get(m.ctx, m.w.pool, j.charge)
	if err != nil {
		t.Fatal(err)
	}
	m.w.stats["job "+j.kind+" "+string(out.event)]++
	line := fmt.Sprintf("run %s with %s: %s", j, a, out.event)
	if out.err != nil {
		line += fmt.Sprintf(" (%v)", out.err)
	}
	t.Logf("%s; charge %s -> %s", line, m.seen[c.ID], describe(c))
	m.seen[c.ID] = describe(c)
}

func describe(c charges.Charge) string {
	s := fmt.Sprintf("%s a%d", c.Status, c.AttemptCount)
	if c.VoidRequested {
		s += " void-requested"
	}
	if c.FailureCode != "" {
		s += " " + c.FailureCode
	}
	return s
}

// customerAction is a customer's request, split so that it can also run
// while a gateway call is in flight (meanwhile): prepare draws its
// parameters, perform runs the use case in its own transaction, and apply
// updates the model and judges the answer.
type customerAction struct {
	name    string
	perform func() error
	apply   func(t *rapid.T, err error, cancelSeq int)
}

// do runs a customer action now, as a step of its own.
func (m *machine) do(t *rapid.T, a customerAction) {
	err := a.perform()
	t.Logf("%s: %v", a.name, err)
	a.apply(t, err, m.w.gw.now())
}

func (m *machine) pause(t *rapid.T)             { m.do(t, m.preparePause(t, m.pickSub(t))) }
func (m *machine) resume(t *rapid.T)            { m.do(t, m.prepareResume(m.pickSub(t))) }
func (m *machine) cancelNow(t *rapid.T)         { m.do(t, m.prepareCancelNow(m.pickSub(t))) }
func (m *machine) cancelAtPeriodEnd(t *rapid.T) { m.do(t, m.prepareCancelAtPeriodEnd(m.pickSub(t))) }
func (m *machine) changeCard(t *rapid.T)        { m.do(t, m.prepareChangeCard(t, m.pickSub(t))) }

func (m *machine) preparePause(t *rapid.T, s *modelSub) customerAction {
	var resumeAt *time.Time
	if d := rapid.SampledFrom([]time.Duration{0, time.Hour, 24 * time.Hour, 10 * 24 * time.Hour}).Draw(t, "resume after"); d > 0 {
		resumeAt = new(m.now().Add(d))
	}
	onResume := rapid.SampledFrom([]subscriptions.OnResume{"", subscriptions.StartNewPeriod, subscriptions.ContinuePeriod}).Draw(t, "on resume")
	return customerAction{
		name: fmt.Sprintf("%s: pause (resume at %s, on resume %q)", s, fmtTime(resumeAt), onResume),
		perform: func() error {
			return m.inTx(func(tx pgx.Tx) error {
				_, err := m.w.svc.Pause(m.ctx, tx, staff, s.id, resumeAt, onResume)
				return err
			})
		},
		apply: func(t *rapid.T, err error, _ int) {
			switch s.status {
			case subscriptions.Paused:
				switch {
				case onResume == "" || onResume == s.onResume:
					requireNoError(t, err, "pausing a paused subscription returns it unchanged")
				case s.cancelAtPeriodEnd && !s.nextChargeAt().After(m.now()):
					requireTransitionError(t, err, "change on_resume after the scheduled cancel's period end")
				default:
					// Decision 4: the pause takes the new on_resume; the
					// time kept is the time left when it began.
					requireNoError(t, err, "change a pause's on_resume")
					s.keep(onResume, s.pausedAt)
				}
			case subscriptions.Active:
				if s.cancelAtPeriodEnd && !s.nextChargeAt().After(m.now()) {
					// Decision 6: the scheduled cancel took effect when
					// the period ended; the scan has not carried it out.
					requireTransitionError(t, err, "pause after the scheduled cancel's period end")
					return
				}
				requireNoError(t, err, "pause an active subscription")
				// Decision 4: a period that began before the pause is owed.
				m.bill(t, s, m.now())
				s.status = subscriptions.Paused
				s.resumeAt = resumeAt
				s.pausedAt = m.now()
				if onResume == "" {
					onResume = subscriptions.StartNewPeriod
				}
				s.keep(onResume, s.pausedAt)
			default:
				requireTransitionError(t, err, "pause a "+string(s.status)+" subscription")
			}
		},
	}
}

func (m *machine) prepareResume(s *modelSub) customerAction {
	return customerAction{
		name: fmt.Sprintf("%s: resume", s),
		perform: func() error {
			return m.inTx(func(tx pgx.Tx) error {
				_, err := m.w.svc.Resume(m.ctx, tx, staff, s.id)
				return err
			})
		},
		apply: func(t *rapid.T, err error, _ int) {
			now := m.now()
			switch {
			case s.status == subscriptions.Active:
				requireNoError(t, err, "resuming an active subscription returns it unchanged")
			case s.status == subscriptions.Paused && s.cancelAtPeriodEnd && !s.nextChargeAt().After(now) && s.kept == nil:
				requireTransitionError(t, err, "resume after the scheduled cancel's period end passed while paused")
			case s.status == subscriptions.Paused:
				requireNoError(t, err, "resume a paused subscription")
				m.resumeAt(s, now)
				m.bill(t, s, now)
			default:
				requireTransitionError(t, err, "resume a "+string(s.status)+" subscription")
			}
		},
	}
}

func (m *machine) prepareCancelNow(s *modelSub) customerAction {
	return customerAction{
		name: fmt.Sprintf("%s: cancel now", s),
		perform: func() error {
			return m.inTx(func(tx pgx.Tx) error {
				_, err := m.w.svc.Cancel(m.ctx, tx, staff, s.id, false)
				return err
			})
		},
		apply: func(t *rapid.T, err error, seq int) {
			requireNoError(t, err, "cancel now")
			if s.status != subscriptions.Cancelled {
				m.cancelled(s, m.now(), seq)
			}
		},
	}
}

func (m *machine) prepareCancelAtPeriodEnd(s *modelSub) customerAction {
	return customerAction{
		name: fmt.Sprintf("%s: cancel at period end", s),
		perform: func() error {
			return m.inTx(func(tx pgx.Tx) error {
				_, err := m.w.svc.Cancel(m.ctx, tx, staff, s.id, true)
				return err
			})
		},
		apply: func(t *rapid.T, err error, seq int) {
			requireNoError(t, err, "cancel at period end")
			now := m.now()
			switch {
			case s.status == subscriptions.Cancelled:
			case billable(s.status):
				// Decision 6: the current period ends, then nothing more;
				// a period that has begun is the current one, and owed.
				m.billAt(t, s, now, seq)
				if s.status != subscriptions.Cancelled {
					s.cancelAtPeriodEnd = true
				}
			case s.cancelAtPeriodEnd:
				// Repeating it returns the subscription unchanged; when
				// the period ended, the next scan carries the cancel out.
			case s.status == subscriptions.Paused && (s.nextChargeAt().After(now) || s.kept != nil):
				s.cancelAtPeriodEnd = true
			default: // unpaid, or paused past its period's end
				m.cancelled(s, now, seq)
			}
		},
	}
}

func (m *machine) listCharges(t *rapid.T, s *modelSub) []charges.Charge {
	cs, err := m.chargesOf(s)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (m *machine) chargesOf(s *modelSub) ([]charges.Charge, error) {
	cs, err := charges.ListBySubscription(m.ctx, m.w.pool, s.id, uuid.Nil, 1000)
	sort.Slice(cs, func(i, j int) bool { return cs[i].PeriodStart.Before(cs[j].PeriodStart) })
	return cs, err
}

var openStatuses = map[charges.Status]bool{charges.Scheduled: true, charges.Authorizing: true, charges.Authorized: true,
	charges.Capturing: true, charges.Declined: true, charges.Unknown: true}

func (m *machine) prepareChangeCard(t *rapid.T, s *modelSub) customerAction {
	token := s.token
	if !rapid.Bool().Draw(t, "same card") {
		token = rapid.SampledFrom(modelTokens).Draw(t, "token")
	}
	var before []charges.Charge
	var tokens map[uuid.UUID]string
	var listErr error
	return customerAction{
		name: fmt.Sprintf("%s: change card %s -> %s", s, s.token, token),
		perform: func() error {
			if before, listErr = m.chargesOf(s); listErr != nil {
				return listErr
			}
			if tokens, listErr = m.chargeTokens(s); listErr != nil {
				return listErr
			}
			return m.inTx(func(tx pgx.Tx) error {
				_, err := m.w.svc.ChangePaymentMethod(m.ctx, tx, staff, s.id, card(token))
				return err
			})
		},
		apply: func(t *rapid.T, err error, _ int) {
			if listErr != nil {
				t.Fatal(listErr)
			}
			m.applyChangeCard(t, s, token, before, tokens, err)
		},
	}
}

// chargeTokens reads the card of each charge's current attempt (the
// charge does not export it).
func (m *machine) chargeTokens(s *modelSub) (map[uuid.UUID]string, error) {
	rows, err := m.w.pool.Query(m.ctx, `SELECT id, pm_token FROM charges WHERE subscription_id = $1`, s.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var token string
		if err := rows.Scan(&id, &token); err != nil {
			return nil, err
		}
		out[id] = token
	}
	return out, rows.Err()
}

func (m *machine) applyChangeCard(t *rapid.T, s *modelSub, token string, before []charges.Charge, tokens map[uuid.UUID]string, err error) {
	now := m.now()
	if s.status == subscriptions.Cancelled {
		requireTransitionError(t, err, "change the card of a cancelled subscription")
		return
	}
	// Decision 7: waiting charges are retried at once; the same card (the
	// one the charge's last attempt used) is refused after a lost or
	// stolen card, or 15 attempts in 30 days.
	waiting, open, refused := 0, false, false
	for _, c := range before {
		if c.Status == charges.Declined || (c.Status == charges.Failed && !c.Resolved) {
			waiting++
			recent := 0
			for _, at := range c.AttemptTimes {
				if now.Sub(at) < charges.SameCardWindow {
					recent++
				}
			}
			if token == tokens[c.ID] && (c.FailureCode == "stolen_card" || recent >= charges.SameCardAttempts) {
				refused = true
			}
		}
		open = open || openStatuses[c.Status]
	}
	if refused {
		if !errors.Is(err, charges.ErrRetryRefused) {
			t.Fatalf("the same card after a stolen card or 15 attempts: want ErrRetryRefused, got %v", err)
		}
		return
	}
	requireNoError(t, err, "change card")
	same := token == s.token
	s.token = token
	if s.status == subscriptions.Unpaid && (!same || waiting > 0) {
		s.status = subscriptions.PastDue
		s.skipStarted(now)
	}
	if s.status == subscriptions.PastDue && waiting == 0 && !open {
		s.status = subscriptions.Active
	}
}

// chargesIn lists every charge in one of statuses, in model order.
func (m *machine) chargesIn(statuses ...charges.Status) []charges.Charge {
	var out []charges.Charge
	for _, s := range m.subs {
		cs, err := charges.ListBySubscription(m.ctx, m.w.pool, s.id, uuid.Nil, 1000)
		if err != nil {
			panic(err)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].PeriodStart.Before(cs[j].PeriodStart) })
		for _, c := range cs {
			for _, st := range statuses {
				if c.Status == st {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// resolve is a person settling a charge in review with the provider's
// evidence: succeeded when the gateway's ledger shows the current
// attempt's capture, failed otherwise.
func (m *machine) resolve(t *rapid.T) {
	cs := m.chargesIn(charges.RequiresReview)
	c := cs[rapid.IntRange(0, len(cs)-1).Draw(t, "charge")]
	outcome := charges.Failed
	evidence := "fake ledger: no capture under " + c.GatewayKey(gateway.OpCapture)
	for _, o := range m.w.gw.view().ops {
		if o.key == c.GatewayKey(gateway.OpCapture) && o.res.Status == gateway.StatusSucceeded {
			outcome, evidence = charges.Succeeded, "fake ledger: capture "+o.res.Reference
		}
	}
	m.pipelineMay = true
	var got charges.Charge
	err := m.inTx(func(tx pgx.Tx) (err error) {
		got, err = m.w.svc.ResolveCharge(m.ctx, tx, staff, c.ID, charges.Resolution{Outcome: outcome, Evidence: evidence, Actor: "model"})
		return err
	})
	t.Logf("%s %s: resolve %s: %v", m.byID[c.SubscriptionID], c.PeriodKey, outcome, err)
	requireNoError(t, err, "resolve with the provider's evidence")
	if got.Status != outcome {
		t.Fatalf("resolved %s, charge is %s", outcome, got.Status)
	}
}

// retry is support starting a new attempt of a charge in review or
// failed; the lookups it makes first may fail.
func (m *machine) retry(t *rapid.T) {
	cs := m.chargesIn(charges.RequiresReview, charges.Failed)
	c := cs[rapid.IntRange(0, len(cs)-1).Draw(t, "charge")]
	a := answers{}
	switch f := rapid.IntRange(0, 5).Draw(t, "lookup fault"); f {
	case 4:
		a.lookup = faultUnavailable
	case 5:
		a.lookup = faultTimeoutBefore
	}
	m.w.gw.setPlan(a)
	var got charges.Charge
	err := m.inTx(func(tx pgx.Tx) (err error) {
		got, err = m.w.svc.RetryCharge(m.ctx, tx, staff, c.ID)
		return err
	})
	m.w.gw.setPlan(answers{})
	s := m.byID[c.SubscriptionID]
	t.Logf("%s %s: retry (%s, lookups %s): %v", s, c.PeriodKey, describe(c), a.lookup, err)
	var te *fsm.TransitionError
	switch {
	case err == nil:
	case errors.As(err, &te) && te.Machine == charges.Machine.Name(), errors.Is(err, charges.ErrRetryRefused), errors.Is(err, charges.ErrGatewayUnreachable):
		return
	default:
		t.Fatalf("retry: unexpected error %v", err)
	}
	if s.status == subscriptions.Cancelled {
		t.Fatalf("retry of a cancelled subscription's charge was accepted")
	}
	if c.Resolved {
		t.Fatalf("retry of a charge a person resolved was accepted")
	}
	if got.Status != charges.Scheduled || got.AttemptCount != c.AttemptCount+1 {
		t.Fatalf("retry: charge is %s, want scheduled a%d", describe(got), c.AttemptCount+1)
	}
	// A retry is never a second payment: the previous attempt holds and
	// took nothing.
	v := m.w.gw.view()
	for _, o := range v.ops {
		if attemptOf(o.key) == attemptOf(c.GatewayKey(gateway.OpAuthorize)) && o.op == gateway.OpCapture && o.res.Status == gateway.StatusSucceeded {
			t.Fatalf("retry accepted while attempt %d was captured (%s)", c.AttemptCount, o.key)
		}
	}
	for _, h := range v.holds {
		if h.authKey == c.GatewayKey(gateway.OpAuthorize) && h.capturedBy == "" && h.voidedBy == "" {
			t.Fatalf("retry accepted while attempt %d holds %s", c.AttemptCount, h.ref)
		}
	}
}

func requireNoError(t *rapid.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func requireTransitionError(t *rapid.T, err error, what string) {
	t.Helper()
	var te *fsm.TransitionError
	if !errors.As(err, &te) || te.Machine != subscriptions.Machine.Name() {
		t.Fatalf("%s: want a transition error, got %v", what, err)
	}
}
