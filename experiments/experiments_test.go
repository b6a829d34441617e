package experiments_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/experiments/stats"
)

var limits = experiments.Limits{
	DunningMax: 30 * 24 * time.Hour, MaxAttempts: experiments.DecisionSevenAttempts, Gateways: []string{"sim1", "sim2"},
	TimeoutFits: func(t time.Duration) error {
		if t > 20*time.Second {
			return fmt.Errorf("too long for the rescue setting")
		}
		return nil
	},
}

const threeArms = `
- key: dunning-fast
  policy: dunning
  start: 2026-01-01T00:00:00Z
  stop: 2027-01-01T00:00:00Z
  min_per_arm: 200
  eligible: {currencies: [RUB], intervals: [month]}
  arms:
    - {name: fast, weight: 30, dunning: [1d, 2d, 4d]}
    - {name: control, weight: 50}
    - {name: morning, weight: 20, dunning: [1d, 3d, 5d, 7d], hour: 9}
`

func parse(t *testing.T, raw string) *experiments.Set {
	t.Helper()
	set, err := experiments.Parse([]byte(raw), limits)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return set
}

func subject(i int) experiments.Subject {
	return experiments.Subject{SubscriptionID: fmt.Sprintf("0192d3a0-0000-7000-8000-%012d", i), CustomerID: fmt.Sprintf("cus_%d", i),
		Currency: "RUB", Interval: "month", CreatedAt: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}
}

var during = time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)

// Over 10,000 subscriptions the arms follow the weights (Pearson's
// chi-square, p > 0.001: the ids are fixed, so the test is deterministic),
// and a second set read from the same file (another node, a restart)
// picks the same arm for every one.
func TestAssignmentFollowsTheWeightsAndEveryNodeAgrees(t *testing.T) {
	a, b := parse(t, threeArms), parse(t, threeArms)
	e, _ := a.Get("dunning-fast")
	counts := map[string]int64{}
	for i := range 10_000 {
		recA, addedA := a.Assign(context.Background(), subject(i), nil, during, experiments.PolicyDunning)
		recB, _ := b.Assign(context.Background(), subject(i), nil, during, experiments.PolicyDunning)
		if !addedA || recA["dunning-fast"] == "" {
			t.Fatalf("subscription %d: not assigned: %v", i, recA)
		}
		if recA["dunning-fast"] != recB["dunning-fast"] {
			t.Fatalf("subscription %d: node A says %s, node B %s", i, recA["dunning-fast"], recB["dunning-fast"])
		}
		if got := experiments.Bucket(e, subject(i).SubscriptionID); got != recA["dunning-fast"] {
			t.Fatalf("subscription %d: the flag gave %s, the bucket %s", i, recA["dunning-fast"], got)
		}
		counts[recA["dunning-fast"]]++
	}
	observed := []int64{counts["control"], counts["fast"], counts["morning"]}
	chi, p := stats.ChiSquareUniformity(observed, []float64{50, 30, 20})
	t.Logf("control %d, fast %d, morning %d: chi-square %.2f, p %.3f", observed[0], observed[1], observed[2], chi, p)
	if p < 0.001 {
		t.Fatalf("the arms do not follow the weights 50/30/20: %v (p %.5f)", observed, p)
	}
}

// A recorded arm rules: new weights, or a hash that would now say
// otherwise, never move a subscription; only experiments it has no arm of
// are assigned.
func TestRecordedArmIsNeverReassigned(t *testing.T) {
	set := parse(t, threeArms)
	rec := map[string]string{"dunning-fast": "morning", "older": "x"}
	for i := range 200 {
		got, added := set.Assign(context.Background(), subject(i), rec, during, experiments.PolicyDunning)
		if added || got["dunning-fast"] != "morning" || got["older"] != "x" {
			t.Fatalf("subscription %d: record %v became %v (added %t)", i, rec, got, added)
		}
	}
	reweighted := parse(t, strings.Replace(threeArms, "{name: control, weight: 50}", "{name: control, weight: 0}", 1))
	first, _ := set.Assign(context.Background(), subject(7), nil, during, experiments.PolicyDunning)
	again, _ := reweighted.Assign(context.Background(), subject(7), first, during, experiments.PolicyDunning)
	if again["dunning-fast"] != first["dunning-fast"] {
		t.Fatalf("a reweighted file moved a recorded subscription from %s to %s", first["dunning-fast"], again["dunning-fast"])
	}
}

// Eligibility and the window decide who is assigned at all.
func TestOnlyEligibleSubscriptionsInTheWindowAreAssigned(t *testing.T) {
	set := parse(t, threeArms)
	cases := []struct {
		name string
		subj func(experiments.Subject) experiments.Subject
		at   time.Time
		pol  experiments.Policy
	}{
		{"another currency", func(s experiments.Subject) experiments.Subject { s.Currency = "USD"; return s }, during, experiments.PolicyDunning},
		{"another interval", func(s experiments.Subject) experiments.Subject { s.Interval = "year"; return s }, during, experiments.PolicyDunning},
		{"before the start", func(s experiments.Subject) experiments.Subject { return s }, time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC), experiments.PolicyDunning},
		{"at the stop", func(s experiments.Subject) experiments.Subject { return s }, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), experiments.PolicyDunning},
		{"another policy asked", func(s experiments.Subject) experiments.Subject { return s }, during, experiments.PolicyGatewayTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if rec, added := set.Assign(context.Background(), c.subj(subject(1)), nil, c.at, c.pol); added || len(rec) > 0 {
				t.Fatalf("assigned %v", rec)
			}
		})
	}
	created := parse(t, strings.Replace(threeArms, "intervals: [month]}", "intervals: [month], created_after: 2026-06-02T00:00:00Z}", 1))
	if rec, added := created.Assign(context.Background(), subject(1), nil, during, experiments.PolicyDunning); added {
		t.Fatalf("a subscription created before created_after was assigned %v", rec)
	}
}

// Past its stop an experiment governs nothing: every subscription is back
// on the default policy at its next decision, its record kept. Control,
// and an arm the file no longer has, are the default policy too.
func TestGoverningEndsAtTheStopAndForControlAndRemovedArms(t *testing.T) {
	set := parse(t, threeArms)
	rec := map[string]string{"dunning-fast": "fast"}
	if _, arm, ok := set.Governing(experiments.PolicyDunning, rec, during); !ok || arm.Name != "fast" || len(arm.Params.Dunning) != 3 {
		t.Fatalf("while running: %v %v", arm, ok)
	}
	stop := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, arm, ok := set.Governing(experiments.PolicyDunning, rec, stop); ok {
		t.Fatalf("after the stop the arm %s still governs", arm.Name)
	}
	for _, r := range []map[string]string{{"dunning-fast": "control"}, {"dunning-fast": "removed"}, {"gone": "fast"}, nil} {
		if _, arm, ok := set.Governing(experiments.PolicyDunning, r, during); ok {
			t.Fatalf("record %v is governed by %s", r, arm.Name)
		}
	}
	if _, _, ok := set.Governing(experiments.PolicyGatewayTimeout, rec, during); ok {
		t.Fatal("a dunning arm governs the gateway timeout")
	}
	var none *experiments.Set
	if _, _, ok := none.Governing(experiments.PolicyDunning, rec, during); ok {
		t.Fatal("no experiments configured, yet an arm governs")
	}
}

// Every arm that would cross a guard rail is refused when the file is
// read, with the experiment, the arm and the field named; one read reports
// every fault.
func TestGuardRailsRefuseBadArms(t *testing.T) {
	exp := func(policy, arm string) string {
		return fmt.Sprintf("- {key: bad, policy: %s, start: 2026-01-01T00:00:00Z, arms: [{name: control, weight: 1}, %s]}", policy, arm)
	}
	cases := []struct {
		name, file, want string
	}{
		{"sixteen attempts", exp("dunning", "{name: t, weight: 1, dunning: [1d,2d,3d,4d,5d,6d,7d,8d,9d,10d,11d,12d,13d,14d,15d]}"),
			`experiment "bad": arm "t": dunning: 15 retries, but a charge may make at most 15 attempts (decision 7)`},
		{"dunning past the maximum", exp("dunning", "{name: t, weight: 1, dunning: [1d, 31d]}"), "past the maximum of 720h0m0s (REBILL_DUNNING_MAX)"},
		{"the hour pushes it past", exp("dunning", "{name: t, weight: 1, dunning: [1d, 30d], hour: 10}"), "with up to a day to reach its hour"},
		{"offsets that do not increase", exp("dunning", "{name: t, weight: 1, dunning: [3d, 2d]}"), "dunning[1]: the offsets must increase"},
		{"two retries in one hour slot", exp("dunning", "{name: t, weight: 1, dunning: [24h, 30h], hour: 10}"), "at least 24h apart"},
		{"hour out of range", exp("dunning", "{name: t, weight: 1, dunning: [1d], hour: 24}"), "hour: want 0 to 23"},
		{"timeout past the rescue", exp("gateway_timeout", "{name: t, weight: 1, timeout: 30s}"), `arm "t": timeout: too long for the rescue setting`},
		{"backoff upside down", exp("gateway_timeout", "{name: t, weight: 1, retry_base: 10s, retry_max: 1s}"), "retry_max: must not be less than retry_base"},
		{"unknown gateway in a priority list", exp("routing", "{name: t, weight: 1, rule: priority, priority: [sim1, paypal]}"), `"paypal" is not a configured gateway`},
		{"unknown rule", exp("routing", "{name: t, weight: 1, rule: random}"), "rule: want cheapest, healthiest or priority"},
		{"a parameter of another policy", exp("dunning", "{name: t, weight: 1, timeout: 5s}"), "timeout: not a parameter of a dunning experiment"},
		{"control sets something", "- {key: bad, policy: dunning, start: 2026-01-01T00:00:00Z, arms: [{name: control, weight: 1, dunning: [1d]}, {name: t, weight: 1, dunning: [2d]}]}",
			"the control arm is the default policy and sets nothing"},
		{"a treatment that sets nothing", exp("dunning", "{name: t, weight: 1}"), "it would be a second control"},
		{"no control", "- {key: bad, policy: dunning, start: 2026-01-01T00:00:00Z, arms: [{name: a, weight: 1, dunning: [1d]}, {name: b, weight: 1, dunning: [2d]}]}",
			`want an arm named "control"`},
		{"weights add up to nothing", "- {key: bad, policy: dunning, start: 2026-01-01T00:00:00Z, arms: [{name: control, weight: 0}, {name: t, weight: 0, dunning: [2d]}]}",
			"the weights add up to 0"},
		{"unknown field", exp("dunning", "{name: t, weight: 1, dunnig: [1d]}"), `unknown field "dunnig"`},
		{"bad key", "- {key: Bad Key, policy: dunning, start: 2026-01-01T00:00:00Z, arms: [{name: control, weight: 1}, {name: t, weight: 1, dunning: [1d]}]}",
			"key: want 1 to 63 lower-case letters"},
		{"stop before start", "- {key: bad, policy: dunning, start: 2026-02-01T00:00:00Z, stop: 2026-01-01T00:00:00Z, arms: [{name: control, weight: 1}, {name: t, weight: 1, dunning: [1d]}]}",
			"stop: must be after start"},
		{"routing eligibility by interval", "- {key: bad, policy: routing, start: 2026-01-01T00:00:00Z, eligible: {intervals: [month]}, arms: [{name: control, weight: 1}, {name: t, weight: 1, rule: healthiest}]}",
			"only currencies apply"},
		{"notice lead too long", exp("notice_lead_time", "{name: t, weight: 1, upcoming: 40d}"), "upcoming: want a duration from 1h to 31d"},
		{"two at once on one policy", threeArms + strings.Replace(strings.TrimPrefix(threeArms, "\n"), "dunning-fast", "dunning-slow", 1),
			`experiment "dunning-slow": varies dunning for subscriptions experiment "dunning-fast" also varies at the same time`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := experiments.Parse([]byte(c.file), limits)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
	many := exp("dunning", "{name: t, weight: 1, dunning: [3d, 2d], hour: 25, timeout: 5s}")
	_, err := experiments.Parse([]byte(many), limits)
	if err == nil || strings.Count(err.Error(), "\n") < 2 {
		t.Fatalf("want every fault reported at once, got %v", err)
	}
}

// Disjoint windows or currencies may vary one policy side by side.
func TestExperimentsOnOnePolicyMayFollowEachOther(t *testing.T) {
	next := strings.NewReplacer("dunning-fast", "dunning-next", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z",
		"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z").Replace(strings.TrimPrefix(threeArms, "\n"))
	parse(t, threeArms+next)
	usd := strings.NewReplacer("dunning-fast", "dunning-usd", "[RUB]", "[USD]").Replace(strings.TrimPrefix(threeArms, "\n"))
	parse(t, threeArms+usd)
}

// A retry moved to its hour lands on that local hour, on the first day it
// is not earlier than the offset, across a daylight-saving change.
func TestNextRetryMovesToTheLocalHour(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database")
	}
	hour := 9
	p := experiments.Params{Dunning: []time.Duration{24 * time.Hour, 72 * time.Hour}, Hour: &hour}
	first := time.Date(2026, 3, 7, 14, 30, 0, 0, ny) // the clocks go forward on 8 March
	cases := []struct {
		attempt int
		want    time.Time
		ok      bool
	}{
		{1, time.Date(2026, 3, 9, 9, 0, 0, 0, ny), true}, // +24h is 8 March 15:30, past 9:00: the next day
		{2, time.Date(2026, 3, 11, 9, 0, 0, 0, ny), true},
		{3, time.Time{}, false},
		{0, time.Time{}, false},
	}
	for _, c := range cases {
		at, ok := p.NextRetry(first, c.attempt, ny)
		if ok != c.ok || !at.Equal(c.want) {
			t.Fatalf("attempt %d: got %v %t, want %v %t", c.attempt, at, ok, c.want, c.ok)
		}
	}
	if got := experiments.AtHour(time.Date(2026, 3, 8, 9, 0, 0, 0, ny), 9, ny); !got.Equal(time.Date(2026, 3, 8, 9, 0, 0, 0, ny)) {
		t.Fatalf("an instant on the hour moved: %v", got)
	}
	plain := experiments.Params{Dunning: []time.Duration{36 * time.Hour}}
	if at, _ := plain.NextRetry(first, 1, ny); !at.Equal(first.Add(36 * time.Hour)) {
		t.Fatalf("without an hour the offset moved: %v", at)
	}
}

// An operator's own flag service plugs in through OpenFeature: the arm it
// names is taken; one rebill does not know is control; a flag it cannot
// evaluate assigns nothing (the subscription stays on the default policy
// and is assigned at a later decision).
func TestAnotherProviderPicksTheArms(t *testing.T) {
	set := parse(t, threeArms)
	flags := memprovider.NewInMemoryProvider(map[string]memprovider.InMemoryFlag{
		"dunning-fast": {Key: "dunning-fast", State: memprovider.Enabled, DefaultVariant: "v",
			Variants: map[string]any{"v": "morning"}},
	})
	if err := set.UseProvider(context.Background(), flags); err != nil {
		t.Fatal(err)
	}
	if rec, _ := set.Assign(context.Background(), subject(1), nil, during, experiments.PolicyDunning); rec["dunning-fast"] != "morning" {
		t.Fatalf("the provider's arm was not taken: %v", rec)
	}
	flags.UpdateFlags(map[string]memprovider.InMemoryFlag{
		"dunning-fast": {Key: "dunning-fast", State: memprovider.Enabled, DefaultVariant: "v", Variants: map[string]any{"v": "turbo"}},
	})
	if rec, _ := set.Assign(context.Background(), subject(1), nil, during, experiments.PolicyDunning); rec["dunning-fast"] != experiments.Control {
		t.Fatalf("an arm not in the file was not taken as control: %v", rec)
	}
	flags.UpdateFlags(map[string]memprovider.InMemoryFlag{})
	if rec, added := set.Assign(context.Background(), subject(1), nil, during, experiments.PolicyDunning); added {
		t.Fatalf("a flag the provider does not have assigned %v", rec)
	}
}

// The file's provider answers through the OpenFeature API as a split,
// with the arm as its variant.
func TestProviderAnswersASplit(t *testing.T) {
	set := parse(t, threeArms)
	e, _ := set.Get("dunning-fast")
	p := experiments.NewProvider(set.List())
	d := p.StringEvaluation(context.Background(), "dunning-fast", "control", openfeature.FlattenedContext{openfeature.TargetingKey: "sub-1"})
	if d.Reason != openfeature.SplitReason || d.Variant != experiments.Bucket(e, "sub-1") || d.Value != d.Variant {
		t.Fatalf("got %+v", d)
	}
	if d := p.StringEvaluation(context.Background(), "nope", "control", openfeature.FlattenedContext{openfeature.TargetingKey: "sub-1"}); d.ResolutionError.Error() == "" {
		t.Fatal("an unknown flag resolved")
	}
	if d := p.StringEvaluation(context.Background(), "dunning-fast", "control", openfeature.FlattenedContext{}); d.ResolutionError.Error() == "" {
		t.Fatal("a flag resolved without a subject")
	}
}

// A routing experiment hashes the customer, the others the subscription:
// two subscriptions of one customer share a routing arm.
func TestRoutingAssignsByCustomer(t *testing.T) {
	set := parse(t, `
- key: route
  policy: routing
  start: 2026-01-01T00:00:00Z
  arms:
    - {name: control, weight: 1}
    - {name: healthy, weight: 1, rule: healthiest}
`)
	differ := 0
	for i := range 100 {
		a, b := subject(i), subject(i+1000)
		b.CustomerID = a.CustomerID
		ra, _ := set.Assign(context.Background(), a, nil, during, experiments.PolicyRouting)
		rb, _ := set.Assign(context.Background(), b, nil, during, experiments.PolicyRouting)
		if ra["route"] != rb["route"] {
			t.Fatalf("customer %s: arms %s and %s", a.CustomerID, ra["route"], rb["route"])
		}
		if ra["route"] != experiments.Control {
			differ++
		}
	}
	if differ == 0 || differ == 100 {
		t.Fatalf("%d of 100 customers in the treatment: the split does not split", differ)
	}
}
