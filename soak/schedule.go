package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
)

// Step kinds.
const (
	KindCreate    = "create"    // create subscription Sub
	KindPause     = "pause"     // pause Sub, with resume_at ResumeIn after now when set
	KindResume    = "resume"    // resume Sub
	KindCancel    = "cancel"    // cancel Sub, at period end when AtPeriodEnd
	KindCard      = "card"      // give Sub the payment method Card
	KindClock     = "clock"     // advance the dev clock by Advance (a barrier: nothing else runs meanwhile)
	KindFault     = "fault"     // set faults on Gateway
	KindKill      = "kill"      // SIGKILL node Node (never the last one alive)
	KindRestart   = "restart"   // start node Node again
	KindTerminate = "terminate" // pg_terminate_backend every database connection of the service
	KindPoolCut   = "pool_cut"  // pg_terminate_backend every other database connection of the service
	// KindFailover: the database's primary dies (immediate stop), its
	// synchronous replica is promoted, and a new synchronous replica is
	// started from it in the dead one's place. One at a time: failovers
	// wait for each other, the other steps go on meanwhile.
	KindFailover = "failover"
	KindSupport  = "support" // a person acts on a charge in review: Action resolve or retry, on the Pick-th
	KindWait     = "wait"    // let time pass (Wait) before launching the next step
	KindSettle   = "settle"  // wait until charging is quiet (a barrier; for hand-written schedules)
	// KindRefund: a person refunds the Pick-th succeeded charge (a fine's
	// when Action is "fine", which must be refused), Amount of it (0: all
	// that is left) for Reason; Twice: two people ask at once, one on
	// each node, under two Idempotency-Keys.
	KindRefund = "refund"
	// KindUpdate: change Sub's terms (Amount and/or Interval, Count),
	// Effective now or at period_end, with Proration (now only).
	KindUpdate = "update"
	// KindRemovePending: remove the update waiting for Sub's period end.
	KindRemovePending = "remove_pending"
	// KindEndTrial: end Sub's trial now (its first period is charged).
	KindEndTrial = "end_trial"
)

// Card is a payment method the schedule gives.
type Card struct {
	Gateway string `json:"gateway"`
	Token   string `json:"token"`
}

// Step is one thing that happens to rebill. Steps refer to subscriptions
// by their number in the schedule (1 for the first created), so a
// schedule replays on a fresh database.
type Step struct {
	N    int    `json:"n"`
	Kind string `json:"kind"`
	Sub  int    `json:"sub,omitempty"`
	// Node is the node a request goes to (the other one when it is down).
	Node int `json:"node"`
	// Twice: the request is sent twice at once, to both nodes, under one
	// Idempotency-Key (a client retrying while its first try still runs).
	Twice bool `json:"twice,omitempty"`

	// create
	Interval string `json:"interval,omitempty"`
	Count    int    `json:"count,omitempty"`
	Zone     string `json:"zone,omitempty"`
	AnchorIn string `json:"anchor_in,omitempty"` // the first billing anchor this long after now ("" = now)
	MonthEnd bool   `json:"month_end,omitempty"` // the anchor on the last day of a month, at least AnchorIn ahead
	// TrialDays: a trial of that many days (trial_period_days), no anchor.
	TrialDays int   `json:"trial_days,omitempty"`
	Amount    int64 `json:"amount,omitempty"`
	Card      *Card `json:"card,omitempty"` // create and card

	// pause, cancel
	ResumeIn    string `json:"resume_in,omitempty"`
	AtPeriodEnd bool   `json:"at_period_end,omitempty"`
	// OnResume is the pause's on_resume ("" for the default).
	OnResume string `json:"on_resume,omitempty"`

	// update: the new terms (zero values: unchanged), when, and how the
	// unused time is settled.
	NewAmount   int64  `json:"new_amount,omitempty"`
	NewInterval string `json:"new_interval,omitempty"`
	NewCount    int    `json:"new_count,omitempty"`
	Effective   string `json:"effective,omitempty"`
	Proration   string `json:"proration,omitempty"`

	// clock
	Advance string `json:"advance,omitempty"`

	// fault
	Gateway   string   `json:"gateway,omitempty"`
	Down      *bool    `json:"down,omitempty"`
	LatencyMS *int     `json:"latency_ms,omitempty"`
	ErrorRate *float64 `json:"error_rate,omitempty"`

	// support
	Action string `json:"action,omitempty"`
	Pick   int    `json:"pick,omitempty"`

	// wait
	Wait string `json:"wait,omitempty"`

	// refund (Amount, Pick and Action above)
	Reason string `json:"reason,omitempty"`
	// fault on refunds
	RefundsDown *bool `json:"refunds_down,omitempty"`
	RefundsLost *bool `json:"refunds_lost,omitempty"`

	AutopayStep
}

// Barrier reports whether the step runs alone: everything launched before
// it finishes first, and nothing after it starts until it is done.
func (s Step) Barrier() bool {
	return s.Kind == KindClock || s.Kind == KindClockTo || s.Kind == KindSettle
}

// String is the step as one readable line.
func (s Step) String() string {
	sub := fmt.Sprintf("sub#%d", s.Sub)
	via := fmt.Sprintf(" (node %s)", nodeName(s.Node))
	if s.Twice {
		via = " (sent twice at once, to both nodes)"
	}
	switch s.Kind {
	case KindCreate:
		anchor := "now"
		if s.AnchorIn != "" {
			anchor = "now+" + s.AnchorIn
		}
		if s.MonthEnd {
			anchor = "last day of the month from " + anchor
		}
		if s.TrialDays > 0 {
			anchor = fmt.Sprintf("after a %d-day trial", s.TrialDays)
		}
		return fmt.Sprintf("%s create every %d %s in %s, anchor %s, amount %d, card %s %s%s", sub, s.Count, s.Interval,
			s.Zone, anchor, s.Amount, s.Card.Gateway, s.Card.Token, via)
	case KindPause:
		mode := ""
		if s.OnResume != "" {
			mode = ", on_resume " + s.OnResume
		}
		if s.ResumeIn != "" {
			return fmt.Sprintf("%s pause, resume_at now+%s%s%s", sub, s.ResumeIn, mode, via)
		}
		return sub + " pause" + mode + via
	case KindUpdate:
		var parts []string
		if s.NewAmount > 0 {
			parts = append(parts, fmt.Sprintf("amount %d", s.NewAmount))
		}
		if s.NewInterval != "" {
			parts = append(parts, fmt.Sprintf("every %d %s", s.NewCount, s.NewInterval))
		}
		how := s.Effective
		if s.Proration != "" {
			how += ", proration " + s.Proration
		}
		return fmt.Sprintf("%s update to %s, %s%s", sub, strings.Join(parts, " "), how, via)
	case KindRemovePending:
		return sub + " remove its pending update" + via
	case KindEndTrial:
		return sub + " end its trial now" + via
	case KindResume:
		return sub + " resume" + via
	case KindCancel:
		if s.AtPeriodEnd {
			return sub + " cancel at period end" + via
		}
		return sub + " cancel now" + via
	case KindCard:
		return fmt.Sprintf("%s card %s %s%s", sub, s.Card.Gateway, s.Card.Token, via)
	case KindClock:
		return "clock +" + s.Advance + via
	case KindFault:
		var parts []string
		if s.Down != nil {
			parts = append(parts, fmt.Sprintf("down=%t", *s.Down))
		}
		if s.LatencyMS != nil {
			parts = append(parts, fmt.Sprintf("latency=%dms", *s.LatencyMS))
		}
		if s.RefundsDown != nil {
			parts = append(parts, fmt.Sprintf("refunds_down=%t", *s.RefundsDown))
		}
		if s.RefundsLost != nil {
			parts = append(parts, fmt.Sprintf("refunds_lost=%t", *s.RefundsLost))
		}
		if s.ErrorRate != nil {
			parts = append(parts, fmt.Sprintf("error_rate=%.2f", *s.ErrorRate))
		}
		return fmt.Sprintf("%s faults %s%s", s.Gateway, strings.Join(parts, " "), via)
	case KindKill:
		return "SIGKILL node " + nodeName(s.Node)
	case KindRestart:
		return "restart node " + nodeName(s.Node)
	case KindTerminate:
		return "pg_terminate_backend every connection of rebill"
	case KindPoolCut:
		return "pg_terminate_backend every other connection of rebill"
	case KindFailover:
		return "database failover: kill the primary, promote the replica, start a new replica"
	case KindSupport:
		return fmt.Sprintf("support %s review-queue charge #%d%s", s.Action, s.Pick, via)
	case KindRefund:
		what := "all that is left"
		if s.Amount > 0 {
			what = fmt.Sprintf("%d", s.Amount)
		}
		of := "succeeded charge"
		if s.Action == "fine" {
			of = "fine's charge (must be refused)"
		}
		return fmt.Sprintf("refund %s of %s #%d, %s%s", what, of, s.Pick, s.Reason, via)
	case KindWait:
		return "wait " + s.Wait
	case KindSettle:
		return "settle (wait until charging is quiet)"
	case KindEnrol, KindBill, KindWithdraw, KindEnrolAction, KindEnrolCard, KindRegistryFault, KindClockTo, KindPaidElsewhere,
		KindZhkhFault:
		return s.autopayString() + via
	}
	return s.Kind
}

func nodeName(n int) string { return string(rune('A' + n)) }

// Schedule is a replayable run: the seed it came from, the settings it ran
// with, and its steps in order.
type Schedule struct {
	Seed   uint64 `json:"seed"`
	Length string `json:"length"` // how long steps were generated for
	Pace   string `json:"pace"`   // the pause between two launches
	Window int    `json:"window"` // steps in flight at once
	Steps  []Step `json:"steps"`
	// Note is free text (a regression schedule says what it shows).
	Note string `json:"note,omitempty"`
}

// List is the schedule as a numbered list, one step a line.
func (s *Schedule) List() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule of seed %d (%d steps, length %s, pace %s, window %d)\n", s.Seed, len(s.Steps), s.Length, s.Pace, s.Window)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "%5d. %s\n", st.N, st)
	}
	return b.String()
}

// Save writes the schedule as JSON.
func (s *Schedule) Save(path string) error {
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// LoadSchedule reads a schedule written by Save.
func LoadSchedule(path string) (*Schedule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Schedule
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// Generator produces a schedule's steps from a seed. It keeps a rough idea
// of what it did (which subscriptions it paused or cancelled, which node
// is down, which faults are on) only to choose plausible next steps; rebill
// decides what really happens, and invalid requests (a resume of an active
// subscription, a card change on a cancelled one) are part of the test.
type Generator struct {
	rng   *rand.Rand
	n     int
	cfg   GeneratorConfig
	subs  []genSub
	down  [2]bool
	fault map[string]bool
	cards int

	enrs    []genEnrollment
	bills   int
	regDown map[string]bool
	// regFault: a registry gateway's error rate ("gmp1:error"), lost
	// answers ("gmp1:lose"), processing ("gmp1:processing") or annulment
	// of unanswered payments ("gmp1:annul") are on.
	regFault map[string]bool
	// fines are the fines sent, for payments made outside rebill.
	fines []genFine
	// docs are the housing bills sent with a payment document, for
	// copies of them.
	docs []genDoc
	// queue holds the rest of a sequence of steps chosen together.
	queue []Step
	// lastFailover is the number of the last failover step (0: none yet).
	lastFailover int
}

// FailoverGap is the fewest steps between two failovers: one failover
// takes seconds (a base backup for the new replica), and a schedule
// should spend most of its time with both members up.
const FailoverGap = 300

// GeneratorConfig bounds what a schedule does.
type GeneratorConfig struct {
	// MaxSubscriptions caps how many subscriptions a schedule creates;
	// LiveSubscriptions how many it keeps not cancelled.
	MaxSubscriptions, LiveSubscriptions int
	// Chaos enables node kills and connection terminations.
	Chaos bool
	// Failover enables database failovers (with Chaos; the database must
	// run on a replication pair).
	Failover bool
	// Autopay is the share (0..1) of steps about autopay enrollments,
	// bills and the registry; MaxEnrollments caps the enrollments.
	Autopay        float64
	MaxEnrollments int
}

type genSub struct {
	paused, cancelled bool
	card              Card
	// amount is the price last asked for; trialing and pending what the
	// generator believes of a trial and a waiting update.
	amount            int64
	trialing, pending bool
}

// NewGenerator returns the generator of seed.
func NewGenerator(seed uint64, cfg GeneratorConfig) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cfg: cfg, fault: map[string]bool{},
		regDown: map[string]bool{}, regFault: map[string]bool{}}
}

var tokenKinds = []struct {
	prefix string
	weight int
	good   bool
}{
	{"tok_ok", 45, true},
	{"tok_decline_funds", 20, false},
	{"tok_decline_hard", 8, false},
	{"tok_lost_response", 12, true},
	{"tok_flaky", 15, true},
}

// GoodToken reports whether a test token authorizes (in the end).
func GoodToken(token string) bool {
	for _, k := range tokenKinds {
		if strings.HasPrefix(token, k.prefix) {
			return k.good
		}
	}
	return false
}

// Last4 is what the gateways' ledgers show of a token.
func Last4(token string) string {
	r := []rune(token)
	if len(r) > 4 {
		r = r[len(r)-4:]
	}
	return string(r)
}

// card returns a new card of a random kind (good only when good is set)
// whose token's last four characters are unique in the schedule, so that
// the ledger tells cards apart.
func (g *Generator) card(good bool) Card {
	total := 0
	for _, k := range tokenKinds {
		if k.good || !good {
			total += k.weight
		}
	}
	pick := g.rng.IntN(total)
	prefix := ""
	for _, k := range tokenKinds {
		if good && !k.good {
			continue
		}
		if pick < k.weight {
			prefix = k.prefix
			break
		}
		pick -= k.weight
	}
	g.cards++
	suffix := strconv.FormatInt(int64(g.cards), 36)
	suffix = strings.Repeat("0", max(0, 4-len(suffix))) + suffix
	return Card{Gateway: fmt.Sprintf("sim%d", 1+g.rng.IntN(3)), Token: prefix + "_" + suffix}
}

func (g *Generator) chance(p float64) bool { return g.rng.Float64() < p }

func (g *Generator) duration(min, max time.Duration) string {
	d := min + time.Duration(g.rng.Int64N(int64(max-min)+1))
	return d.Truncate(time.Second).String()
}

// pickSub chooses a subscription that is (believed) in a state where want
// holds, or any when none is.
func (g *Generator) pickSub(want func(genSub) bool) int {
	var fits []int
	for i, s := range g.subs {
		if want(s) {
			fits = append(fits, i+1)
		}
	}
	if len(fits) == 0 {
		if len(g.subs) == 0 {
			return 0
		}
		return 1 + g.rng.IntN(len(g.subs))
	}
	return fits[g.rng.IntN(len(fits))]
}

func (g *Generator) live() int {
	n := 0
	for _, s := range g.subs {
		if !s.cancelled {
			n++
		}
	}
	return n
}

// Next returns the next step.
func (g *Generator) Next() Step {
	g.n++
	if len(g.queue) > 0 {
		s := g.queue[0]
		g.queue = g.queue[1:]
		s.N = g.n
		return s
	}
	for {
		if s := g.choose(Step{N: g.n, Node: g.rng.IntN(2)}); s.Kind != "" {
			switch s.Kind {
			case KindCreate, KindPause, KindResume, KindCancel, KindCard, KindEnrol, KindBill, KindEnrolAction, KindEnrolCard,
				KindUpdate, KindRemovePending, KindEndTrial:
				s.Twice = g.chance(0.1)
			}
			return s
		}
	}
}

func (g *Generator) choose(s Step) Step {
	if g.cfg.Autopay > 0 && g.chance(g.cfg.Autopay) {
		return g.autopay(s)
	}
	live := g.live()
	canCreate := len(g.subs) < g.cfg.MaxSubscriptions && live < g.cfg.LiveSubscriptions
	if len(g.subs) < 3 && canCreate {
		return g.create(s)
	}
	r := g.rng.Float64() * 100
	active := func(x genSub) bool { return !x.cancelled && !x.paused }
	switch {
	case r < 9:
		if canCreate {
			return g.create(s)
		}
		if live >= g.cfg.LiveSubscriptions {
			s.Kind, s.Sub = KindCancel, g.pickSub(active)
			s.AtPeriodEnd = g.chance(0.5)
			g.subs[s.Sub-1].cancelled = !s.AtPeriodEnd
			return s
		}
	case r < 17:
		s.Kind, s.Sub = KindPause, g.pickSub(active)
		if g.chance(0.5) {
			if g.chance(0.6) {
				s.ResumeIn = g.duration(10*time.Minute, 30*time.Hour)
			} else {
				s.ResumeIn = g.duration(30*time.Hour, 50*24*time.Hour)
			}
		}
		if g.chance(0.35) {
			s.OnResume = "continue_period"
		}
		g.subs[s.Sub-1].paused = true
		return s
	case r < 24:
		s.Kind, s.Sub = KindResume, g.pickSub(func(x genSub) bool { return x.paused && !x.cancelled })
		g.subs[s.Sub-1].paused = false
		return s
	case r < 27:
		s.Kind, s.Sub = KindCancel, g.pickSub(func(x genSub) bool { return !x.cancelled })
		s.AtPeriodEnd = g.chance(0.6)
		if !s.AtPeriodEnd {
			g.subs[s.Sub-1].cancelled = true
		}
		return s
	case r < 38:
		s.Kind, s.Sub = KindCard, g.pickSub(func(x genSub) bool { return !x.cancelled })
		sub := &g.subs[s.Sub-1]
		if g.chance(0.3) {
			c := sub.card // the same card again: "try again"
			s.Card = &c
		} else {
			c := g.card(g.chance(0.6))
			s.Card = &c
			sub.card = c
		}
		return s
	case r < 50:
		s.Kind = KindClock // small: minutes to hours
		s.Advance = addOddSeconds(g, g.duration(time.Minute, 3*time.Hour))
		return s
	case r < 51.5:
		s.Kind = KindClock
		if g.chance(0.8) {
			s.Advance = g.duration(20*time.Hour, 9*24*time.Hour)
		} else {
			s.Advance = g.duration(25*24*time.Hour, 45*24*time.Hour)
		}
		s.Advance = addOddSeconds(g, s.Advance)
		return s
	case r < 58:
		return g.faultStep(s)
	case r < 59.5:
		if !g.cfg.Chaos {
			return Step{}
		}
		if g.down[0] || g.down[1] {
			return g.restart(s)
		}
		s.Kind = KindKill
		g.down[s.Node] = true
		return s
	case r < 61.5:
		if !g.cfg.Chaos {
			return Step{}
		}
		s.Kind = KindTerminate
		return s
	case r < 66:
		s.Kind, s.Pick = KindSupport, g.rng.IntN(10)
		s.Action = "resolve"
		if g.chance(0.5) {
			s.Action = "retry"
		}
		return s
	case r < 69:
		return g.refund(s)
	case r < 76:
		return g.update(s)
	case r < 77:
		s.Kind, s.Sub = KindRemovePending, g.pickSub(func(x genSub) bool { return x.pending && !x.cancelled })
		g.subs[s.Sub-1].pending = false
		return s
	case r < 77.7:
		s.Kind, s.Sub = KindEndTrial, g.pickSub(func(x genSub) bool { return x.trialing && !x.cancelled })
		g.subs[s.Sub-1].trialing = false
		return s
	case r < 78.7:
		if !g.cfg.Chaos {
			return Step{}
		}
		s.Kind = KindPoolCut
		return s
	case r < 78.9:
		if !g.cfg.Chaos || !g.cfg.Failover || (g.lastFailover > 0 && g.n-g.lastFailover < FailoverGap) {
			return Step{}
		}
		s.Kind = KindFailover
		g.lastFailover = g.n
		return s
	default:
		if (g.down[0] || g.down[1]) && g.chance(0.1) {
			return g.restart(s)
		}
		s.Kind = KindWait
		s.Wait = (time.Duration(20+g.rng.IntN(400)) * time.Millisecond).String()
		return s
	}
	return Step{}
}

// addOddSeconds adds a few seconds to a clock move so that moves do not
// land exactly on period boundaries (an instant where the order of a scan
// and a customer's request decides, which the record cannot show).
func addOddSeconds(g *Generator, d string) string {
	dur, _ := time.ParseDuration(d)
	return (dur + time.Duration(1+g.rng.IntN(59))*time.Second).String()
}

func (g *Generator) restart(s Step) Step {
	s.Kind = KindRestart
	if g.down[0] {
		s.Node = 0
	} else {
		s.Node = 1
	}
	g.down[s.Node] = false
	return s
}

func (g *Generator) create(s Step) Step {
	s.Kind = KindCreate
	g.subs = append(g.subs, genSub{})
	s.Sub = len(g.subs)
	iv := []string{"day", "week", "week", "month", "month", "month", "month", "quarter", "year"}
	s.Interval = iv[g.rng.IntN(len(iv))]
	s.Count = 1
	if g.chance(0.15) {
		s.Count = 2 + g.rng.IntN(2)
	}
	zones := []string{"UTC", "UTC", "UTC", "Europe/Moscow", "America/New_York"}
	s.Zone = zones[g.rng.IntN(len(zones))]
	switch {
	case g.chance(0.12):
		s.TrialDays = 1 + g.rng.IntN(20)
		g.subs[s.Sub-1].trialing = true
	case g.chance(0.1):
		s.MonthEnd = true
		s.AnchorIn = g.duration(time.Minute, 40*24*time.Hour)
	case g.chance(0.3):
		s.AnchorIn = g.duration(time.Minute, 40*24*time.Hour)
	}
	s.Amount = int64(100 + g.rng.IntN(100000))
	g.subs[s.Sub-1].amount = s.Amount
	c := g.card(false)
	s.Card = &c
	g.subs[s.Sub-1].card = c
	return s
}

// update changes a subscription's price (down to 60 %, up to 160 %), its
// interval, or both, now with one of the prorations or at period end.
func (g *Generator) update(s Step) Step {
	s.Kind, s.Sub = KindUpdate, g.pickSub(func(x genSub) bool { return !x.cancelled })
	sub := &g.subs[s.Sub-1]
	what := g.rng.IntN(20)
	if what < 15 {
		s.NewAmount = max(1, sub.amount*int64(60+g.rng.IntN(101))/100)
		sub.amount = s.NewAmount
	}
	if what >= 12 {
		iv := []string{"day", "week", "month", "month", "quarter", "year"}
		s.NewInterval, s.NewCount = iv[g.rng.IntN(len(iv))], 1
	}
	s.Effective = "now"
	if g.chance(0.45) {
		s.Effective = "period_end"
		sub.pending = true
	} else {
		s.Proration = []string{"none", "charge_now", "credit_next"}[g.rng.IntN(3)]
	}
	return s
}

func (g *Generator) faultStep(s Step) Step {
	s.Kind = KindFault
	s.Gateway = fmt.Sprintf("sim%d", 1+g.rng.IntN(3))
	on := g.fault[s.Gateway]
	if on && g.chance(0.6) {
		f, z := false, 0
		var e float64
		s.Down, s.LatencyMS, s.ErrorRate, s.RefundsDown, s.RefundsLost = &f, &z, &e, &f, &f
		g.fault[s.Gateway] = false
		return s
	}
	switch g.rng.IntN(6) {
	case 4:
		t := true
		s.RefundsDown = &t
	case 5:
		t := true
		s.RefundsLost = &t
	case 0:
		t := true
		s.Down = &t
	case 1, 2:
		// Around the gateway timeout (400 ms): below, near, above.
		ms := []int{100, 250, 380, 400, 430, 600, 1200}[g.rng.IntN(7)]
		s.LatencyMS = &ms
	default:
		e := []float64{0.1, 0.3, 0.6, 0.9}[g.rng.IntN(4)]
		s.ErrorRate = &e
	}
	g.fault[s.Gateway] = true
	return s
}

// refund is a person's refund of a succeeded charge: in full or in part
// (an amount that may be more than is left, which must be refused), now
// and then two at once on the two nodes, and now and then of a fine's
// charge, which must be refused.
func (g *Generator) refund(s Step) Step {
	s.Kind, s.Pick = KindRefund, g.rng.IntN(50)
	s.Reason = []string{"duplicate", "fraudulent", "requested_by_customer"}[g.rng.IntN(3)]
	if g.chance(0.6) {
		s.Amount = []int64{1, 100, 250, 499, 1000, 5000}[g.rng.IntN(6)]
	}
	s.Twice = g.chance(0.3)
	if g.cfg.Autopay > 0 && g.chance(0.1) {
		s.Action = "fine"
	}
	return s
}
