package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway/fleet"
)

func candidate(name string, priority int, bps map[string]int64, currencies []string, h fleet.Health) fleet.Candidate {
	if h.Circuit == "" {
		h.Circuit = fleet.CircuitClosed
	}
	return fleet.Candidate{Name: name, Settings: fleet.Settings{Priority: priority, CommissionBPS: bps, Currencies: currencies}, Health: h}
}

func TestChooseBinding(t *testing.T) {
	t.Parallel()
	healthy := fleet.Health{}
	rub := []string{"RUB"}
	type verdict struct {
		name     string
		eligible bool
		cost     int64 // -1: null
		reason   string
	}
	for _, tc := range []struct {
		name       string
		candidates []fleet.Candidate
		currency   string
		amount     int64
		gateway    string
		reason     string
		verdicts   []verdict
	}{
		{
			name: "cheapest wins, cost rounded up (the OpenAPI document's 749)",
			candidates: []fleet.Candidate{
				candidate("sim1", 1, map[string]int64{"*": 180}, nil, healthy),
				candidate("sim2", 2, map[string]int64{"RUB": 150}, rub, healthy),
			},
			currency: "RUB", amount: 49900, gateway: "sim2", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"sim2", true, 749, fleet.ReasonSelected}, {"sim1", true, 899, fleet.ReasonHigherCost}},
		},
		{
			name: "a tie on cost goes to the lower priority number",
			candidates: []fleet.Candidate{
				candidate("b", 2, map[string]int64{"*": 200}, nil, healthy),
				candidate("a", 1, map[string]int64{"*": 201}, nil, healthy),
				candidate("c", 3, map[string]int64{"*": 200}, nil, healthy),
			},
			// 100 * 2.00 % = 2 and 100 * 2.01 % = 2.01 -> 3: a and b/c differ.
			currency: "USD", amount: 100, gateway: "b", reason: fleet.RouteCheapestByPriority,
			verdicts: []verdict{{"b", true, 2, fleet.ReasonSelected}, {"c", true, 2, fleet.ReasonLowerPriority},
				{"a", true, 3, fleet.ReasonHigherCost}},
		},
		{
			name: "rounding makes different commissions equal: priority decides",
			candidates: []fleet.Candidate{
				candidate("b", 2, map[string]int64{"*": 150}, nil, healthy),
				candidate("a", 1, map[string]int64{"*": 199}, nil, healthy),
			},
			currency: "USD", amount: 1, gateway: "a", reason: fleet.RouteCheapestByPriority,
			verdicts: []verdict{{"a", true, 1, fleet.ReasonSelected}, {"b", true, 1, fleet.ReasonLowerPriority}},
		},
		{
			name: "an open circuit makes the cheapest ineligible",
			candidates: []fleet.Candidate{
				candidate("cheap", 1, map[string]int64{"*": 100}, nil, fleet.Health{Circuit: fleet.CircuitOpen}),
				candidate("dear", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "dear", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"dear", true, 300, fleet.ReasonSelected}, {"cheap", false, 100, fleet.ReasonCircuitOpen}},
		},
		{
			name: "half open is eligible: a probe may pass",
			candidates: []fleet.Candidate{
				candidate("cheap", 1, map[string]int64{"*": 100}, nil, fleet.Health{Circuit: fleet.CircuitHalfOpen}),
				candidate("dear", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "cheap", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"cheap", true, 100, fleet.ReasonSelected}, {"dear", true, 300, fleet.ReasonHigherCost}},
		},
		{
			name: "error rate over 50 % with 10 calls is ineligible",
			candidates: []fleet.Candidate{
				candidate("flaky", 1, map[string]int64{"*": 100}, nil, fleet.Health{Calls: 10, ErrorRate: 0.6}),
				candidate("ok", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "ok", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"ok", true, 300, fleet.ReasonSelected}, {"flaky", false, 100, fleet.ReasonErrorRate}},
		},
		{
			name: "exactly 50 % is still eligible",
			candidates: []fleet.Candidate{
				candidate("half", 1, map[string]int64{"*": 100}, nil, fleet.Health{Calls: 10, ErrorRate: 0.5}),
			},
			currency: "RUB", amount: 10000, gateway: "half", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"half", true, 100, fleet.ReasonSelected}},
		},
		{
			name: "a high error rate over fewer than 10 calls is not enough",
			candidates: []fleet.Candidate{
				candidate("new", 1, map[string]int64{"*": 100}, nil, fleet.Health{Calls: 9, ErrorRate: 1}),
			},
			currency: "RUB", amount: 10000, gateway: "new", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"new", true, 100, fleet.ReasonSelected}},
		},
		{
			name: "a currency not taken has no cost; a per-currency commission beats the wildcard",
			candidates: []fleet.Candidate{
				candidate("rub", 1, map[string]int64{"RUB": 250}, rub, healthy),
				candidate("multi", 2, map[string]int64{"EUR": 100, "*": 300}, []string{"EUR", "USD"}, healthy),
			},
			currency: "EUR", amount: 1000, gateway: "multi", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"multi", true, 10, fleet.ReasonSelected}, {"rub", false, -1, fleet.ReasonCurrency}},
		},
		{
			name: "nobody eligible",
			candidates: []fleet.Candidate{
				candidate("rub", 1, map[string]int64{"RUB": 250}, rub, healthy),
				candidate("down", 2, map[string]int64{"*": 300}, nil, fleet.Health{Circuit: fleet.CircuitOpen}),
			},
			currency: "USD", amount: 1000, reason: fleet.RouteNone,
			// Ineligible ones follow by priority.
			verdicts: []verdict{{"rub", false, -1, fleet.ReasonCurrency}, {"down", false, 30, fleet.ReasonCircuitOpen}},
		},
		{
			name: "no gateway configured", currency: "RUB", amount: 1, reason: fleet.RouteNone, verdicts: []verdict{},
		},
		{
			name: "the largest amount does not overflow",
			candidates: []fleet.Candidate{
				candidate("max", 1, map[string]int64{"*": 10000}, nil, healthy),
			},
			currency: "RUB", amount: 1<<63 - 1, gateway: "max", reason: fleet.RouteCheapest,
			verdicts: []verdict{{"max", true, 1<<63 - 1, fleet.ReasonSelected}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			route := fleet.ChooseBinding(tc.candidates, tc.currency, tc.amount)
			require.Equal(t, tc.gateway, route.Gateway)
			require.Equal(t, tc.reason, route.Reason)
			got := make([]verdict, len(route.Candidates))
			for i, v := range route.Candidates {
				cost := int64(-1)
				if v.Cost != nil {
					cost = *v.Cost
				}
				got[i] = verdict{v.Name, v.Eligible, cost, v.Reason}
			}
			require.Equal(t, tc.verdicts, got)
		})
	}
}

func TestCommissionCostRoundsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ amount, bps, want int64 }{
		{49900, 150, 749}, // 748.5
		{10000, 150, 150},
		{1, 1, 1},
		{1, 0, 0},
		{9999, 1, 1},
		{10001, 10000, 10001},
	} {
		require.Equal(t, tc.want, fleet.CommissionCost(tc.amount, tc.bps), "%d at %d bps", tc.amount, tc.bps)
	}
}

// BenchmarkChooseBinding is one routing decision over dev mode's five
// gateways, one of them unhealthy.
func BenchmarkChooseBinding(b *testing.B) {
	candidates := []fleet.Candidate{
		candidate("sim1", 1, map[string]int64{"*": 150}, nil, fleet.Health{Circuit: fleet.CircuitOpen}),
		candidate("sim2", 2, map[string]int64{"*": 180}, nil, fleet.Health{}),
		candidate("sim3", 3, map[string]int64{"RUB": 200}, []string{"RUB"}, fleet.Health{}),
		candidate("sim4", 4, map[string]int64{"*": 250}, nil, fleet.Health{Calls: 40, ErrorRate: 0.75}),
		candidate("sim5", 5, map[string]int64{"*": 300}, nil, fleet.Health{}),
	}
	b.ReportAllocs()
	for b.Loop() {
		fleet.ChooseBinding(candidates, "RUB", 49900)
	}
}

// A routing arm's rule reorders only the eligible gateways: healthiest by
// error rate (ties as the cheapest rule orders them), a fixed list by its
// order with the unlisted after; an ineligible gateway is never chosen,
// however healthy or high on the list.
func TestChooseBindingByAnArmsRule(t *testing.T) {
	t.Parallel()
	rub := map[string]int64{"RUB": 100}
	cands := []fleet.Candidate{
		candidate("cheap", 1, map[string]int64{"RUB": 50}, nil, fleet.Health{Calls: 20, ErrorRate: 0.3}),
		candidate("steady", 2, rub, nil, fleet.Health{Calls: 20, ErrorRate: 0.05}),
		candidate("steady2", 3, rub, nil, fleet.Health{Calls: 20, ErrorRate: 0.05}),
		candidate("open", 0, map[string]int64{"RUB": 10}, nil, fleet.Health{Circuit: fleet.CircuitOpen}),
	}
	names := func(r fleet.Route) (out []string) {
		for _, v := range r.Candidates {
			out = append(out, v.Name+":"+v.Reason)
		}
		return out
	}
	r := fleet.ChooseBindingByHealth(cands, "RUB", 10_000)
	require.Equal(t, "steady", r.Gateway)
	require.Equal(t, fleet.RouteHealthiest, r.Reason)
	require.Equal(t, []string{"steady:selected", "steady2:not_preferred", "cheap:not_preferred", "open:circuit_open"}, names(r))

	r = fleet.ChooseBindingByList(cands, "RUB", 10_000, []string{"open", "steady2"})
	require.Equal(t, "steady2", r.Gateway)
	require.Equal(t, fleet.RouteFixedPriority, r.Reason)
	require.Equal(t, []string{"steady2:selected", "cheap:not_preferred", "steady:not_preferred", "open:circuit_open"}, names(r))

	none := fleet.ChooseBindingByList(cands[3:], "RUB", 10_000, []string{"open"})
	require.Empty(t, none.Gateway)
	require.Equal(t, fleet.RouteNone, none.Reason)
}
