package soak_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/rebill/rebill/soak"
)

// The autopay steps of a long schedule aim clock moves at bills'
// deadlines, leave holds waiting past their lifetime on a down registry
// or gateway, and enrol accounts again: by the same customer (whom rebill
// must refuse, 409 enrollment-exists) and by another (whose copy of a bill
// must not be paid a second time). A seed gives the same steps.
func TestAutopayStepsCoverDeadlinesHoldsAndReEnrolment(t *testing.T) {
	gen := func() []soak.Step {
		g := soak.NewGenerator(7, soak.GeneratorConfig{MaxSubscriptions: 40, LiveSubscriptions: 20, Chaos: true, Autopay: 0.2,
			MaxEnrollments: 60})
		out := make([]soak.Step, 6000)
		for i := range out {
			out[i] = g.Next()
		}
		return out
	}
	steps := gen()
	if !reflect.DeepEqual(steps, gen()) {
		t.Fatal("one seed gave two schedules")
	}
	targets := map[string]map[string]bool{soak.TargetDiscount: {}, soak.TargetLastAttempt: {}}
	type account struct{ kind, account string }
	customers := map[account]map[string]bool{}
	sameCustomer, otherCustomer, cyrillic, lapses := 0, 0, 0, 0
	for i, s := range steps {
		if s.N != i+1 {
			t.Fatalf("step %d numbered %d", i+1, s.N)
		}
		switch s.Kind {
		case soak.KindClockTo:
			switch {
			case s.Offset < 0:
				targets[s.Target]["before"] = true
			case s.Offset == 0:
				targets[s.Target]["at"] = true
			default:
				targets[s.Target]["after"] = true
			}
		case soak.KindEnrol:
			k := account{s.EnrKind, soak.Cyrillic(s.Account)}
			switch {
			case customers[k] == nil:
				customers[k] = map[string]bool{}
			case customers[k][s.Customer]:
				sameCustomer++
			default:
				otherCustomer++
			}
			if s.EnrKind == "housing" && s.Account == k.account && customers[k][s.Customer] {
				cyrillic++ // a housing ELS enrolled again, written in Cyrillic
			}
			customers[k][s.Customer] = true
		case soak.KindClock:
			d, err := time.ParseDuration(s.Advance)
			if err != nil {
				t.Fatal(err)
			}
			if d > soak.HoldLifetime && d < soak.HoldLifetime+4*time.Hour && i >= 3 && steps[i-1].Kind == soak.KindWait {
				lapses++
			}
		}
	}
	for target, at := range targets {
		for _, w := range []string{"before", "at", "after"} {
			if !at[w] {
				t.Errorf("no clock move to just %s %s", w, target)
			}
		}
	}
	if sameCustomer == 0 || otherCustomer == 0 || cyrillic == 0 {
		t.Errorf("re-enrolments: %d by the same customer (%d in Cyrillic), %d by another", sameCustomer, cyrillic, otherCustomer)
	}
	if lapses == 0 {
		t.Error("no clock move past a hold's lifetime while it waits")
	}
}
