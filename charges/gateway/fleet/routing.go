package fleet

import (
	"cmp"
	"math/bits"
	"slices"
)

// Routing applies to new card bindings only: a recurring charge stays on
// the gateway that issued its token, whatever this says.
const (
	// RoutingMinCalls and RoutingMaxErrorRate: a gateway whose error rate
	// exceeds RoutingMaxErrorRate over at least RoutingMinCalls calls in
	// the health window is not offered (the OpenAPI document, decision 30).
	RoutingMinCalls     = 10
	RoutingMaxErrorRate = 0.5
)

// Verdict reasons of a candidate.
const (
	// ReasonSelected: the chosen gateway.
	ReasonSelected = "selected"
	// ReasonHigherCost: eligible, but another costs less.
	ReasonHigherCost = "higher_cost"
	// ReasonLowerPriority: eligible and as cheap as the chosen one, which
	// has a lower priority number.
	ReasonLowerPriority = "lower_priority"
	// ReasonCurrency: the gateway does not take the currency.
	ReasonCurrency = "currency_not_supported"
	// ReasonCircuitOpen: calls to the gateway are paused.
	ReasonCircuitOpen = "circuit_open"
	// ReasonErrorRate: most recent calls got no verdict.
	ReasonErrorRate = "error_rate_too_high"
)

// Decision reasons.
const (
	// RouteCheapest: the chosen gateway costs less than every other
	// eligible one.
	RouteCheapest = "cheapest"
	// RouteCheapestByPriority: several eligible gateways cost the least;
	// the lowest priority number won.
	RouteCheapestByPriority = "cheapest_then_priority"
	// RouteNone: no gateway is eligible; Gateway is empty.
	RouteNone = "no_eligible_gateway"
)

// Candidate is a gateway as routing sees it: its terms and this node's
// view of its health.
type Candidate struct {
	Name     string
	Settings Settings
	Health   Health
}

// Verdict is one candidate's assessment. Cost is nil when the gateway does
// not take the currency.
type Verdict struct {
	Name     string
	Eligible bool
	Cost     *int64
	Priority int
	Reason   string
}

// Route is where to bind a new card: Gateway is empty when none is
// eligible. Candidates are ordered as considered: eligible ones by cost
// then priority, then the others.
type Route struct {
	Gateway    string
	Reason     string
	Candidates []Verdict
}

// Commission is the gateway's commission on currency in basis points; ok
// is false when it does not take the currency.
func (s Settings) Commission(currency string) (bps int64, ok bool) {
	if len(s.Currencies) > 0 && !slices.Contains(s.Currencies, currency) {
		return 0, false
	}
	if bps, ok := s.CommissionBPS[currency]; ok {
		return bps, true
	}
	bps, ok = s.CommissionBPS["*"]
	return bps, ok
}

// CommissionCost is bps basis points of amount (minor units), rounded up:
// the gateway keeps whole minor units. amount > 0 and 0 <= bps <= 10000,
// so the product fits in 128 bits and the result in an int64.
func CommissionCost(amount, bps int64) int64 {
	hi, lo := bits.Mul64(uint64(amount), uint64(bps))
	q, r := bits.Div64(hi, lo, 10_000)
	if r > 0 {
		q++
	}
	return int64(q)
}

// ChooseBinding picks the gateway for a new card in currency for amount:
// the cheapest eligible one (commission on amount, rounded up), ties to the
// lower priority number, then the name. A gateway is ineligible when it
// does not take the currency, its circuit is open, or its error rate is
// over RoutingMaxErrorRate with at least RoutingMinCalls calls in the
// window. It is a pure function of its arguments.
func ChooseBinding(candidates []Candidate, currency string, amount int64) Route {
	verdicts := make([]Verdict, len(candidates))
	for i, c := range candidates {
		v := Verdict{Name: c.Name, Priority: c.Settings.Priority}
		bps, takes := c.Settings.Commission(currency)
		if takes {
			cost := CommissionCost(amount, bps)
			v.Cost = &cost
		}
		switch {
		case !takes:
			v.Reason = ReasonCurrency
		case c.Health.Circuit == CircuitOpen:
			v.Reason = ReasonCircuitOpen
		case c.Health.Calls >= RoutingMinCalls && c.Health.ErrorRate > RoutingMaxErrorRate:
			v.Reason = ReasonErrorRate
		default:
			v.Eligible = true
		}
		verdicts[i] = v
	}
	slices.SortStableFunc(verdicts, func(a, b Verdict) int {
		switch {
		case a.Eligible != b.Eligible:
			if a.Eligible {
				return -1
			}
			return 1
		case a.Eligible && *a.Cost != *b.Cost:
			return cmp.Compare(*a.Cost, *b.Cost)
		case a.Priority != b.Priority:
			return cmp.Compare(a.Priority, b.Priority)
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(verdicts) == 0 || !verdicts[0].Eligible {
		return Route{Reason: RouteNone, Candidates: verdicts}
	}
	best := verdicts[0]
	route := Route{Gateway: best.Name, Reason: RouteCheapest, Candidates: verdicts}
	verdicts[0].Reason = ReasonSelected
	for i := 1; i < len(verdicts) && verdicts[i].Eligible; i++ {
		verdicts[i].Reason = ReasonHigherCost
		if *verdicts[i].Cost == *best.Cost {
			verdicts[i].Reason = ReasonLowerPriority
			route.Reason = RouteCheapestByPriority
		}
	}
	return route
}

// RouteBinding is ChooseBinding over the configured gateways, as this node
// sees their health.
func (r *Gateways) RouteBinding(currency string, amount int64) Route {
	list := r.List()
	candidates := make([]Candidate, len(list))
	for i, g := range list {
		candidates[i] = Candidate{Name: g.Name, Settings: g.Settings, Health: g.Health}
	}
	return ChooseBinding(candidates, currency, amount)
}

// The rules a routing experiment's arm may set instead of the cheapest.
const (
	// RouteHealthiest: the eligible gateway with the lowest error rate in
	// the health window, ties to the cheaper, then as ChooseBinding.
	RouteHealthiest = "healthiest"
	// RouteFixedPriority: the first eligible gateway of a fixed list; one
	// not listed comes after those listed, as ChooseBinding orders them.
	RouteFixedPriority = "fixed_priority"
	// ReasonNotPreferred: eligible, but the rule preferred another.
	ReasonNotPreferred = "not_preferred"
)

// ChooseBindingByHealth is ChooseBinding with the eligible gateways
// reordered by error rate.
func ChooseBindingByHealth(candidates []Candidate, currency string, amount int64) Route {
	rate := map[string]float64{}
	for _, c := range candidates {
		rate[c.Name] = c.Health.ErrorRate
	}
	return reorder(ChooseBinding(candidates, currency, amount), RouteHealthiest, func(a, b Verdict) int {
		return cmp.Compare(rate[a.Name], rate[b.Name])
	})
}

// ChooseBindingByList is ChooseBinding with the eligible gateways
// reordered by their place in list.
func ChooseBindingByList(candidates []Candidate, currency string, amount int64, list []string) Route {
	place := func(name string) int {
		if i := slices.Index(list, name); i >= 0 {
			return i
		}
		return len(list)
	}
	return reorder(ChooseBinding(candidates, currency, amount), RouteFixedPriority, func(a, b Verdict) int {
		return cmp.Compare(place(a.Name), place(b.Name))
	})
}

// reorder sorts the eligible head of route's candidates stably by less
// (ties keep ChooseBinding's order) and picks the first: the ineligible
// stay ineligible whatever a rule prefers.
func reorder(route Route, reason string, less func(a, b Verdict) int) Route {
	n := 0
	for n < len(route.Candidates) && route.Candidates[n].Eligible {
		n++
	}
	if n == 0 {
		return route
	}
	slices.SortStableFunc(route.Candidates[:n], less)
	for i := range route.Candidates[:n] {
		route.Candidates[i].Reason = ReasonNotPreferred
	}
	route.Candidates[0].Reason = ReasonSelected
	route.Gateway, route.Reason = route.Candidates[0].Name, reason
	return route
}

// RouteBindingBy is RouteBinding under rule (RouteHealthiest,
// RouteFixedPriority with list, or the cheapest for anything else).
func (r *Gateways) RouteBindingBy(rule string, list []string, currency string, amount int64) Route {
	gateways := r.List()
	candidates := make([]Candidate, len(gateways))
	for i, g := range gateways {
		candidates[i] = Candidate{Name: g.Name, Settings: g.Settings, Health: g.Health}
	}
	switch rule {
	case RouteHealthiest:
		return ChooseBindingByHealth(candidates, currency, amount)
	case RouteFixedPriority:
		return ChooseBindingByList(candidates, currency, amount, list)
	}
	return ChooseBinding(candidates, currency, amount)
}
