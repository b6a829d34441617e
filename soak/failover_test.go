package soak_test

import (
	"strings"
	"testing"

	"github.com/rebill/rebill/soak"
)

// Long schedules fail the database over a handful of times, never two
// failovers within FailoverGap steps (the driver runs them one at a time
// besides), cut half the pool now and then, and never do either without
// chaos; without a replication pair they never fail over.
func TestGeneratorFailsOverRarelyAndApart(t *testing.T) {
	const steps = 4500 // about ten minutes of a soak
	count := func(seed uint64, cfg soak.GeneratorConfig) (failovers []int, cuts int) {
		g := soak.NewGenerator(seed, cfg)
		for range steps {
			s := g.Next()
			switch s.Kind {
			case soak.KindFailover:
				failovers = append(failovers, s.N)
			case soak.KindPoolCut:
				cuts++
			}
		}
		return failovers, cuts
	}
	cfg := soak.GeneratorConfig{MaxSubscriptions: 150, LiveSubscriptions: 40, Chaos: true, Autopay: 0.2, MaxEnrollments: 60,
		Failover: true}
	total := 0
	for seed := uint64(1); seed <= 10; seed++ {
		failovers, cuts := count(seed, cfg)
		total += len(failovers)
		if len(failovers) > 10 {
			t.Errorf("seed %d: %d failovers in %d steps, more than a handful", seed, len(failovers), steps)
		}
		for i := 1; i < len(failovers); i++ {
			if gap := failovers[i] - failovers[i-1]; gap < soak.FailoverGap {
				t.Errorf("seed %d: failovers at steps %d and %d, %d steps apart", seed, failovers[i-1], failovers[i], gap)
			}
		}
		if cuts == 0 {
			t.Errorf("seed %d: no pool cut in %d steps", seed, steps)
		}
	}
	if total < 10 {
		t.Errorf("%d failovers in 10 schedules of %d steps", total, steps)
	}
	t.Logf("%d failovers in 10 schedules of %d steps", total, steps)

	noPair := cfg
	noPair.Failover = false
	noChaos := cfg
	noChaos.Chaos = false
	for _, c := range []soak.GeneratorConfig{noPair, noChaos} {
		if failovers, _ := count(3, c); len(failovers) > 0 {
			t.Errorf("failovers with Chaos %t, Failover %t: at steps %v", c.Chaos, c.Failover, failovers)
		}
	}
	if _, cuts := count(3, noChaos); cuts > 0 {
		t.Errorf("%d pool cuts without chaos", cuts)
	}
}

// A pool cut and a failover while charges are in flight (one gateway
// slow, one down): the nodes ride through, the promoted replica holds
// every commit, and the invariants hold on the gateways' ledgers. The
// schedule is a regression test of the failover step itself: the new
// primary is the other member, and exactly one failover happened.
func TestFailoverWithChargesInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs two rebill processes")
	}
	if *connsFlag == 0 {
		*connsFlag = 8
	}
	yes, latency := true, 300
	var steps []soak.Step
	add := func(s soak.Step) {
		s.N = len(steps) + 1
		steps = append(steps, s)
	}
	for i := 1; i <= 12; i++ {
		gateway := "sim1"
		if i%2 == 0 {
			gateway = "sim2"
		}
		add(soak.Step{Kind: soak.KindCreate, Sub: i, Node: i % 2, Interval: "day", Count: 1, Zone: "UTC", Amount: int64(1000 + i),
			Card: &soak.Card{Gateway: gateway, Token: "tok_ok_f" + string(rune('a'+i)) + "00"}})
	}
	add(soak.Step{Kind: soak.KindSettle})
	add(soak.Step{Kind: soak.KindFault, Gateway: "sim1", LatencyMS: &latency})
	add(soak.Step{Kind: soak.KindFault, Gateway: "sim2", Down: &yes, Node: 1})
	add(soak.Step{Kind: soak.KindClock, Advance: "49h17s"})
	// Time for the scans to start the due charges, so that the kill
	// finds some of them under way (the assertions below do not depend
	// on it: due subscriptions count as open work too).
	add(soak.Step{Kind: soak.KindWait, Wait: "1500ms"})
	add(soak.Step{Kind: soak.KindPoolCut})
	add(soak.Step{Kind: soak.KindFailover})
	no, none := false, 0
	add(soak.Step{Kind: soak.KindFault, Gateway: "sim1", LatencyMS: &none})
	add(soak.Step{Kind: soak.KindFault, Gateway: "sim2", Down: &no, Node: 1})
	add(soak.Step{Kind: soak.KindSettle})
	sched := &soak.Schedule{Seed: 990001, Length: "0s", Pace: "40ms", Window: 4, Steps: steps,
		Note: "a failover while charges are in flight"}

	r := runSchedule(t, sched, nil)
	if r.pair == nil {
		t.Skipf("no replication pair: %s", r.pairMissing)
	}
	port, failovers := r.pair.state()
	if failovers != 1 {
		t.Errorf("%d failovers, want 1", failovers)
	}
	if port != r.pair.ports[1] {
		t.Errorf("the primary is on port %d, want the promoted replica's %d", port, r.pair.ports[1])
	}
	if len(r.failoverOpen) != 1 || r.failoverOpen[0] == "" || strings.HasPrefix(r.failoverOpen[0], "unknown") {
		t.Errorf("work open when the primary died: %q, want charges under way", r.failoverOpen)
	}
	t.Logf("open at the failover: %s; it took %s", r.failoverOpen, r.failoverTook)
	for _, n := range r.notes {
		if strings.Contains(n, "failover") {
			t.Errorf("note: %s", n)
		}
	}
}
