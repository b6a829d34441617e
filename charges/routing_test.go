package charges_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

func candidate(name string, priority int, bps map[string]int64, currencies []string, h charges.Health) charges.Candidate {
	if h.Circuit == "" {
		h.Circuit = charges.CircuitClosed
	}
	return charges.Candidate{Name: name, Settings: charges.Settings{Priority: priority, CommissionBPS: bps, Currencies: currencies}, Health: h}
}

func TestChooseBinding(t *testing.T) {
	t.Parallel()
	healthy := charges.Health{}
	rub := []string{"RUB"}
	type verdict struct {
		name     string
		eligible bool
		cost     int64 // -1: null
		reason   string
	}
	for _, tc := range []struct {
		name       string
		candidates []charges.Candidate
		currency   string
		amount     int64
		gateway    string
		reason     string
		verdicts   []verdict
	}{
		{
			name: "cheapest wins, cost rounded up (the OpenAPI document's 749)",
			candidates: []charges.Candidate{
				candidate("sim1", 1, map[string]int64{"*": 180}, nil, healthy),
				candidate("sim2", 2, map[string]int64{"RUB": 150}, rub, healthy),
			},
			currency: "RUB", amount: 49900, gateway: "sim2", reason: charges.RouteCheapest,
			verdicts: []verdict{{"sim2", true, 749, charges.ReasonSelected}, {"sim1", true, 899, charges.ReasonHigherCost}},
		},
		{
			name: "a tie on cost goes to the lower priority number",
			candidates: []charges.Candidate{
				candidate("b", 2, map[string]int64{"*": 200}, nil, healthy),
				candidate("a", 1, map[string]int64{"*": 201}, nil, healthy),
				candidate("c", 3, map[string]int64{"*": 200}, nil, healthy),
			},
			// 100 * 2.00 % = 2 and 100 * 2.01 % = 2.01 -> 3: a and b/c differ.
			currency: "USD", amount: 100, gateway: "b", reason: charges.RouteCheapestByPriority,
			verdicts: []verdict{{"b", true, 2, charges.ReasonSelected}, {"c", true, 2, charges.ReasonLowerPriority},
				{"a", true, 3, charges.ReasonHigherCost}},
		},
		{
			name: "rounding makes different commissions equal: priority decides",
			candidates: []charges.Candidate{
				candidate("b", 2, map[string]int64{"*": 150}, nil, healthy),
				candidate("a", 1, map[string]int64{"*": 199}, nil, healthy),
			},
			currency: "USD", amount: 1, gateway: "a", reason: charges.RouteCheapestByPriority,
			verdicts: []verdict{{"a", true, 1, charges.ReasonSelected}, {"b", true, 1, charges.ReasonLowerPriority}},
		},
		{
			name: "an open circuit makes the cheapest ineligible",
			candidates: []charges.Candidate{
				candidate("cheap", 1, map[string]int64{"*": 100}, nil, charges.Health{Circuit: charges.CircuitOpen}),
				candidate("dear", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "dear", reason: charges.RouteCheapest,
			verdicts: []verdict{{"dear", true, 300, charges.ReasonSelected}, {"cheap", false, 100, charges.ReasonCircuitOpen}},
		},
		{
			name: "half open is eligible: a probe may pass",
			candidates: []charges.Candidate{
				candidate("cheap", 1, map[string]int64{"*": 100}, nil, charges.Health{Circuit: charges.CircuitHalfOpen}),
				candidate("dear", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "cheap", reason: charges.RouteCheapest,
			verdicts: []verdict{{"cheap", true, 100, charges.ReasonSelected}, {"dear", true, 300, charges.ReasonHigherCost}},
		},
		{
			name: "error rate over 50 % with 10 calls is ineligible",
			candidates: []charges.Candidate{
				candidate("flaky", 1, map[string]int64{"*": 100}, nil, charges.Health{Calls: 10, ErrorRate: 0.6}),
				candidate("ok", 2, map[string]int64{"*": 300}, nil, healthy),
			},
			currency: "RUB", amount: 10000, gateway: "ok", reason: charges.RouteCheapest,
			verdicts: []verdict{{"ok", true, 300, charges.ReasonSelected}, {"flaky", false, 100, charges.ReasonErrorRate}},
		},
		{
			name: "exactly 50 % is still eligible",
			candidates: []charges.Candidate{
				candidate("half", 1, map[string]int64{"*": 100}, nil, charges.Health{Calls: 10, ErrorRate: 0.5}),
			},
			currency: "RUB", amount: 10000, gateway: "half", reason: charges.RouteCheapest,
			verdicts: []verdict{{"half", true, 100, charges.ReasonSelected}},
		},
		{
			name: "a high error rate over fewer than 10 calls is not enough",
			candidates: []charges.Candidate{
				candidate("new", 1, map[string]int64{"*": 100}, nil, charges.Health{Calls: 9, ErrorRate: 1}),
			},
			currency: "RUB", amount: 10000, gateway: "new", reason: charges.RouteCheapest,
			verdicts: []verdict{{"new", true, 100, charges.ReasonSelected}},
		},
		{
			name: "a currency not taken has no cost; a per-currency commission beats the wildcard",
			candidates: []charges.Candidate{
				candidate("rub", 1, map[string]int64{"RUB": 250}, rub, healthy),
				candidate("multi", 2, map[string]int64{"EUR": 100, "*": 300}, []string{"EUR", "USD"}, healthy),
			},
			currency: "EUR", amount: 1000, gateway: "multi", reason: charges.RouteCheapest,
			verdicts: []verdict{{"multi", true, 10, charges.ReasonSelected}, {"rub", false, -1, charges.ReasonCurrency}},
		},
		{
			name: "nobody eligible",
			candidates: []charges.Candidate{
				candidate("rub", 1, map[string]int64{"RUB": 250}, rub, healthy),
				candidate("down", 2, map[string]int64{"*": 300}, nil, charges.Health{Circuit: charges.CircuitOpen}),
			},
			currency: "USD", amount: 1000, reason: charges.RouteNone,
			// Ineligible ones follow by priority.
			verdicts: []verdict{{"rub", false, -1, charges.ReasonCurrency}, {"down", false, 30, charges.ReasonCircuitOpen}},
		},
		{
			name: "no gateway configured", currency: "RUB", amount: 1, reason: charges.RouteNone, verdicts: []verdict{},
		},
		{
			name: "the largest amount does not overflow",
			candidates: []charges.Candidate{
				candidate("max", 1, map[string]int64{"*": 10000}, nil, healthy),
			},
			currency: "RUB", amount: 1<<63 - 1, gateway: "max", reason: charges.RouteCheapest,
			verdicts: []verdict{{"max", true, 1<<63 - 1, charges.ReasonSelected}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			route := charges.ChooseBinding(tc.candidates, tc.currency, tc.amount)
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
		require.Equal(t, tc.want, charges.CommissionCost(tc.amount, tc.bps), "%d at %d bps", tc.amount, tc.bps)
	}
}

// BenchmarkChooseBinding is one routing decision over dev mode's five
// gateways, one of them unhealthy.
func BenchmarkChooseBinding(b *testing.B) {
	candidates := []charges.Candidate{
		candidate("sim1", 1, map[string]int64{"*": 150}, nil, charges.Health{Circuit: charges.CircuitOpen}),
		candidate("sim2", 2, map[string]int64{"*": 180}, nil, charges.Health{}),
		candidate("sim3", 3, map[string]int64{"RUB": 200}, []string{"RUB"}, charges.Health{}),
		candidate("sim4", 4, map[string]int64{"*": 250}, nil, charges.Health{Calls: 40, ErrorRate: 0.75}),
		candidate("sim5", 5, map[string]int64{"*": 300}, nil, charges.Health{}),
	}
	b.ReportAllocs()
	for b.Loop() {
		charges.ChooseBinding(candidates, "RUB", 49900)
	}
}
