package api

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
)

// maxRoutedAmount is the largest amount a subscription may have.
const maxRoutedAmount = 999_999_999_999

type gatewayHealthJSON struct {
	Circuit     string  `json:"circuit"`
	Calls       int     `json:"calls"`
	ErrorRate   float64 `json:"error_rate"`
	TimeoutRate float64 `json:"timeout_rate"`
	P50MS       float64 `json:"p50_ms"`
	P95MS       float64 `json:"p95_ms"`
	Window      string  `json:"window"`
}

type gatewayJSON struct {
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	Priority      int               `json:"priority"`
	CommissionBPS map[string]int64  `json:"commission_bps"`
	Currencies    []string          `json:"currencies"`
	HoldLifetime  *string           `json:"hold_lifetime"`
	Health        gatewayHealthJSON `json:"health"`
}

func toGatewayJSON(g fleet.GatewayStatus) gatewayJSON {
	out := gatewayJSON{Name: g.Name, Kind: g.Kind, Priority: g.Priority, CommissionBPS: g.CommissionBPS,
		Currencies: g.Currencies, Health: gatewayHealthJSON{
			Circuit: g.Health.Circuit, Calls: g.Health.Calls, ErrorRate: round4(g.Health.ErrorRate),
			TimeoutRate: round4(g.Health.TimeoutRate), P50MS: millis(g.Health.P50.Seconds()),
			P95MS: millis(g.Health.P95.Seconds()), Window: "5m",
		}}
	if out.CommissionBPS == nil {
		out.CommissionBPS = map[string]int64{}
	}
	if out.Currencies == nil {
		out.Currencies = []string{}
	}
	if g.HoldLifetime > 0 {
		d := formatDuration(g.HoldLifetime)
		out.HoldLifetime = &d
	}
	return out
}

// formatDuration writes whole hours as the configuration does ("96h"),
// anything else as Go does ("90m0s").
func formatDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func round4(f float64) float64 { return math.Round(f*10_000) / 10_000 }

func millis(seconds float64) float64 { return math.Round(seconds*1_000_000) / 1_000 }

// listGateways answers GET /v1/gateways: every configured gateway with
// this node's view of its health.
func (s *Server) listGateways(w http.ResponseWriter, _ *http.Request) {
	var list []fleet.GatewayStatus
	if s.Gateways != nil {
		list = s.Gateways.List()
	}
	data := make([]gatewayJSON, len(list))
	for i, g := range list {
		data[i] = toGatewayJSON(g)
	}
	writeJSON(w, http.StatusOK, struct {
		Data []gatewayJSON `json:"data"`
	}{data})
}

type verdictJSON struct {
	Name     string `json:"name"`
	Eligible bool   `json:"eligible"`
	Cost     *int64 `json:"cost"`
	Reason   string `json:"reason"`
}

type routeJSON struct {
	Gateway    *string       `json:"gateway"`
	Reason     string        `json:"reason"`
	Candidates []verdictJSON `json:"candidates"`
	// Experiment is the routing experiment and arm the customer is in;
	// null when none governs the binding.
	Experiment *armRefJSON `json:"experiment"`
}

type armRefJSON struct {
	Key string `json:"key"`
	Arm string `json:"arm"`
}

// routeBinding answers GET /v1/routing/binding: where a client should bind
// a new card for currency and amount.
func (s *Server) routeBinding(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var errs rebilltype.Errors
	currency := q.Get("currency")
	if _, ok := validate.Currency(currency); !ok {
		errs.Add("currency", "must be an active ISO 4217 code in upper case, e.g. RUB")
	}
	amount, err := strconv.ParseInt(q.Get("amount"), 10, 64)
	if err != nil || amount < 1 || amount > maxRoutedAmount {
		errs.Add("amount", "must be an integer number of minor units between 1 and %d", int64(maxRoutedAmount))
	}
	customer := q.Get("customer_id")
	if q.Has("customer_id") && !rebilltype.ValidCustomerID(customer) {
		errs.Add("customer_id", "must be 1..%d printable ASCII characters, not only spaces", rebilltype.MaxCustomerID)
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	// A customer key binds its own customer's cards: it may not learn
	// another customer's arm.
	if own := callerFrom(r).CustomerID; own != "" && customer != "" && customer != own {
		s.fail(w, r, errForeignCustomer)
		return
	}
	var (
		route fleet.Route
		ref   *armRefJSON
	)
	rule, list := fleet.RouteCheapest, []string(nil)
	if customer != "" {
		if e, arm, ok := s.routingArm(r, customer, currency); ok {
			ref = &armRefJSON{Key: e.Key, Arm: arm.Name}
			rule, list = routingRule(arm.Params)
		}
	}
	if s.Gateways != nil {
		route = s.Gateways.RouteBindingBy(rule, list, currency, amount)
	} else {
		route = fleet.ChooseBinding(nil, currency, amount)
	}
	out := routeJSON{Reason: route.Reason, Candidates: make([]verdictJSON, len(route.Candidates)), Experiment: ref}
	if route.Gateway != "" {
		out.Gateway = &route.Gateway
	}
	for i, v := range route.Candidates {
		out.Candidates[i] = verdictJSON{Name: v.Name, Eligible: v.Eligible, Cost: v.Cost, Reason: v.Reason}
	}
	writeJSON(w, http.StatusOK, out)
}

var errForeignCustomer = fault.New(fault.Forbidden, "A customer key routes only its own customer's card bindings.")

// routingArm is the routing experiment and arm that govern a binding of
// customer's card in currency now: the customer is assigned by the hash of
// the experiment key and its id, so the same customer gets the same arm
// on every node, and its subscription records that arm when created.
func (s *Server) routingArm(r *http.Request, customer, currency string) (experiments.Experiment, experiments.Arm, bool) {
	if s.ExperimentSet == nil {
		return experiments.Experiment{}, experiments.Arm{}, false
	}
	now := s.Clock.Now()
	rec, _ := s.ExperimentSet.Assign(r.Context(), experiments.Subject{CustomerID: customer, Currency: currency}, nil, now,
		experiments.PolicyRouting)
	for key, name := range rec {
		e, _ := s.ExperimentSet.Get(key)
		arm, _ := e.Arm(name)
		return e, arm, true
	}
	return experiments.Experiment{}, experiments.Arm{}, false
}

// routingRule is the fleet's rule for a routing arm's parameters (control
// has none: the cheapest).
func routingRule(p experiments.Params) (string, []string) {
	switch p.Rule {
	case experiments.RouteHealthiest:
		return fleet.RouteHealthiest, nil
	case experiments.RoutePriority:
		return fleet.RouteFixedPriority, p.Priority
	}
	return fleet.RouteCheapest, nil
}
