package soak_test

import (
	"testing"

	"github.com/rebill/rebill/soak"
)

// The generator issues refunds of every shape the invariants must judge:
// full and partial, two at once on the two nodes, a fine's (to be
// refused), each reason, and turns the simulators' refund faults on and
// off.
func TestGeneratorIssuesRefundsUnderTheirFaults(t *testing.T) {
	g := soak.NewGenerator(11, soak.GeneratorConfig{MaxSubscriptions: 40, LiveSubscriptions: 20, Chaos: true, Autopay: 0.2})
	var full, partial, twice, fine, down, lost, off int
	reasons := map[string]bool{}
	for range 20000 {
		s := g.Next()
		switch s.Kind {
		case soak.KindRefund:
			if s.Amount > 0 {
				partial++
			} else {
				full++
			}
			if s.Twice {
				twice++
			}
			if s.Action == "fine" {
				fine++
			}
			reasons[s.Reason] = true
			if s.String() == "" {
				t.Fatal("a refund step without a description")
			}
		case soak.KindFault:
			switch {
			case s.RefundsDown != nil && *s.RefundsDown:
				down++
			case s.RefundsLost != nil && *s.RefundsLost:
				lost++
			case s.RefundsDown != nil && !*s.RefundsDown:
				off++
			}
		}
	}
	for name, n := range map[string]int{"full": full, "partial": partial, "on two nodes": twice, "of a fine": fine,
		"refunds_down": down, "refunds_lost": lost, "faults off": off} {
		if n == 0 {
			t.Errorf("no %s refund step in 20000 steps", name)
		}
	}
	if len(reasons) != 3 {
		t.Errorf("reasons %v, want all three", reasons)
	}
	t.Logf("refunds: %d full, %d partial, %d on two nodes, %d of a fine; faults: %d refunds_down, %d refunds_lost, %d off",
		full, partial, twice, fine, down, lost, off)
}
