package soak_test

import (
	"fmt"
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

// Fines are paid outside rebill in full, at their discount and in part,
// before they reach rebill, while the registry is down, while it refuses
// or loses postings, and while the card's gateway is down; the registry's
// faults include error rates, lost answers, payments processing (past a
// hold's last moment to post too) and annulled when unanswered.
func TestGenPaidElsewhereAtEveryMoment(t *testing.T) {
	g := soak.NewGenerator(11, soak.GeneratorConfig{MaxSubscriptions: 40, LiveSubscriptions: 20, Chaos: true, Autopay: 0.3,
		MaxEnrollments: 60})
	steps := make([]soak.Step, 8000)
	for i := range steps {
		steps[i] = g.Next()
	}
	parts := map[string]int{}
	moments := map[string]int{}
	regFaults := map[string]int{}
	arrived := map[string]bool{}
	for i, s := range steps {
		switch s.Kind {
		case soak.KindBill:
			arrived[s.BillID] = true
		case soak.KindRegistryFault:
			if s.Processing != nil && *s.Processing >= 8 {
				regFaults["processing past the last moment"]++
			}
			switch {
			case s.AnnulUnanswered != nil && *s.AnnulUnanswered:
				regFaults["annul_unanswered"]++
			case s.Processing != nil && *s.Processing > 0:
				regFaults["processing"]++
			case s.ErrorRate != nil && *s.ErrorRate > 0:
				regFaults["error_rate"]++
			case s.LoseResponse != nil && *s.LoseResponse:
				regFaults["lose_response"]++
			case s.Down != nil && *s.Down:
				regFaults["down"]++
			}
		case soak.KindPaidElsewhere:
			parts[s.Part]++
			if s.PaidAmount <= 0 || s.BillID == "" || s.Enr == 0 {
				t.Fatalf("step %d: %s", s.N, s)
			}
			if !arrived[s.BillID] {
				moments["before arrival"]++
				continue
			}
			if i < 3 || steps[i-1].Kind != soak.KindWait {
				moments["any time after"]++
				continue
			}
			switch prev := steps[i-3]; {
			case prev.Kind == soak.KindRegistryFault && prev.Down != nil:
				moments["registry down"]++
			case prev.Kind == soak.KindRegistryFault:
				moments["postings refused or lost"]++
			case prev.Kind == soak.KindFault:
				moments["card's gateway down"]++
			}
		}
	}
	for _, p := range []string{soak.PartFull, soak.PartDiscounted, soak.PartSome} {
		if parts[p] == 0 {
			t.Errorf("no fine paid outside rebill %s: %v", p, parts)
		}
	}
	for _, m := range []string{"before arrival", "any time after", "registry down", "postings refused or lost", "card's gateway down"} {
		if moments[m] == 0 {
			t.Errorf("no fine paid outside rebill %s: %v", m, moments)
		}
	}
	for _, f := range []string{"down", "error_rate", "lose_response", "processing", "annul_unanswered", "processing past the last moment"} {
		if regFaults[f] == 0 {
			t.Errorf("no registry fault %s: %v", f, regFaults)
		}
	}
}

// Housing bills name their payment documents (ИПД) half the time, and
// copies of them are sent as decision 23 has them paid once: the same
// account and bill id without the ИПД after it, and with it after a copy
// without it, and the same ИПД under another enrollment; the simulated GIS
// ZhKH party goes down, fails at a rate, loses answers and keeps reports
// processing, each switched back off.
func TestGenHousingDocumentsAndZhkhFaults(t *testing.T) {
	g := soak.NewGenerator(13, soak.GeneratorConfig{MaxSubscriptions: 40, LiveSubscriptions: 20, Chaos: true, Autopay: 0.3,
		MaxEnrollments: 60})
	enrs := map[int]string{} // enrollment -> account
	type copyOf struct{ account, bill string }
	withDoc := map[copyOf]bool{}
	withoutDoc := map[copyOf]bool{}
	docEnrs := map[string]map[int]bool{}
	seen := map[string]int{}
	for range 8000 {
		s := g.Next()
		switch s.Kind {
		case soak.KindEnrol:
			enrs[s.Enr] = soak.Cyrillic(s.Account)
		case soak.KindBill:
			k := copyOf{enrs[s.Enr], s.BillID}
			if s.PaymentDocumentID == "" {
				if withDoc[k] {
					seen["copy without the ИПД after it"]++
				}
				withoutDoc[k] = true
				continue
			}
			seen["bills with an ИПД"]++
			if withoutDoc[k] {
				seen["copy with the ИПД after one without"]++
			}
			withDoc[k] = true
			if docEnrs[s.PaymentDocumentID] == nil {
				docEnrs[s.PaymentDocumentID] = map[int]bool{}
			}
			if len(docEnrs[s.PaymentDocumentID]) > 0 && !docEnrs[s.PaymentDocumentID][s.Enr] {
				seen["one ИПД under two enrollments"]++
			}
			docEnrs[s.PaymentDocumentID][s.Enr] = true
			if len([]rune(s.PaymentDocumentID)) != 18 || s.Period != s.BillID[:7] {
				t.Errorf("step %d: %s", s.N, s)
			}
		case soak.KindZhkhFault:
			if s.Gateway != "zhkh1" {
				t.Fatalf("step %d: %s", s.N, s)
			}
			switch {
			case s.Down != nil:
				seen[fmt.Sprintf("down=%t", *s.Down)]++
			case s.ErrorRate != nil:
				seen[fmt.Sprintf("error_rate>0=%t", *s.ErrorRate > 0)]++
			case s.LoseResponse != nil:
				seen[fmt.Sprintf("lose_response=%t", *s.LoseResponse)]++
			case s.Processing != nil:
				seen[fmt.Sprintf("processing>0=%t", *s.Processing > 0)]++
			}
		}
	}
	for _, want := range []string{"bills with an ИПД", "copy without the ИПД after it", "copy with the ИПД after one without",
		"one ИПД under two enrollments", "down=true", "down=false", "error_rate>0=true", "error_rate>0=false",
		"lose_response=true", "lose_response=false", "processing>0=true", "processing>0=false"} {
		if seen[want] == 0 {
			t.Errorf("no %s: %v", want, seen)
		}
	}
	t.Logf("housing documents and GIS ZhKH faults: %v", seen)
}
