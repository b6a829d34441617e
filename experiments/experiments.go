// Package experiments runs billing-policy experiments on live traffic: an
// experiment varies one policy (the dunning schedule, the gateway timeout
// and technical retry backoff, the routing rule of new card bindings, or
// the lead time of the upcoming-charge notice) between a control arm, which
// is the configured default policy, and treatment arms, on a share of the
// subscriptions eligible for it.
//
// Experiments are read from REBILL_EXPERIMENTS_FILE at start and checked
// against the guard rails then (see [Limits]): no arm can change what
// keeps money safe. An arm is picked by a flag evaluation through the
// OpenFeature API, whose in-process provider ([Provider]) hashes
// (experiment key, subject) into the arms' weights, so every node and
// every restart picks the same arm without shared state. The arm is
// recorded on the subscription and on each charge it governs, and the
// record rules from then on: a change of weights never moves a
// subscription, and results can be recomputed from the data alone.
//
// An experiment acts only between its start and stop times: past its stop
// every subscription returns to the default policy at its next decision,
// although its record stays (results still read it). An arm that is no
// longer in the file is control.
package experiments

import (
	"slices"
	"time"
)

// Policy is what an experiment varies.
type Policy string

// The policies an experiment can vary.
const (
	// PolicyDunning: the offsets of the retries after a soft decline, and
	// optionally the local hour of day they run at.
	PolicyDunning Policy = "dunning"
	// PolicyGatewayTimeout: the timeout of every gateway call of a charge
	// and the backoff of its technical retries.
	PolicyGatewayTimeout Policy = "gateway_timeout"
	// PolicyRouting: the rule that picks the gateway of a new card
	// binding (per customer: a binding comes before its subscription).
	PolicyRouting Policy = "routing"
	// PolicyNoticeLead: how long before a renewal charge.upcoming is sent.
	PolicyNoticeLead Policy = "notice_lead_time"
)

// Policies are the policies in the order they are documented.
var Policies = []Policy{PolicyDunning, PolicyGatewayTimeout, PolicyRouting, PolicyNoticeLead}

// Control is the name of the arm that keeps the default policy. Every
// experiment has one, and it sets no parameters.
const Control = "control"

// The routing rules an arm of a routing experiment can set.
const (
	// RouteCheapest is the default rule: the cheapest eligible gateway.
	RouteCheapest = "cheapest"
	// RouteHealthiest: the eligible gateway with the lowest error rate.
	RouteHealthiest = "healthiest"
	// RoutePriority: the first eligible gateway of a fixed list.
	RoutePriority = "priority"
)

// Experiment is one experiment as configured.
type Experiment struct {
	Key         string
	Description string
	Policy      Policy
	Arms        []Arm
	Eligible    Eligibility
	// Start and Stop bound when the experiment acts; a zero Stop: until
	// the experiment is removed from the file.
	Start, Stop time.Time
	// MinPerArm is the fixed horizon: how many subjects each arm needs
	// before the report states a verdict.
	MinPerArm int64
}

// Arm is one arm: its weight among the experiment's arms and the policy it
// applies (control's is the default).
type Arm struct {
	Name   string
	Weight int
	Params Params
}

// Params are the policy parameters an arm sets; only those of the
// experiment's policy are allowed.
type Params struct {
	// Dunning: the offsets of the retries from the first decline, and the
	// local hour (0-23, in the subscription's time zone) each retry is
	// moved forward to; nil Hour keeps the offsets' own time of day.
	Dunning []time.Duration
	Hour    *int
	// Gateway timeout: the timeout of each call, and the base and cap of
	// the technical retry backoff (zero: the default).
	Timeout   time.Duration
	RetryBase time.Duration
	RetryMax  time.Duration
	// Routing: the rule, and for RoutePriority the gateways in order.
	Rule     string
	Priority []string
	// Notice lead time: how long before a renewal charge.upcoming is sent.
	Upcoming time.Duration
}

// Eligibility says which subscriptions take part. Empty lists allow all.
type Eligibility struct {
	Currencies   []string
	Intervals    []string
	CreatedAfter time.Time
}

// Subject is what eligibility and assignment know of a subscription (or,
// for routing, of the customer binding a card: only CustomerID and
// Currency are set then).
type Subject struct {
	SubscriptionID string
	CustomerID     string
	Currency       string
	Interval       string
	CreatedAt      time.Time
}

// Running reports whether e acts at now.
func (e Experiment) Running(now time.Time) bool {
	return !now.Before(e.Start) && (e.Stop.IsZero() || now.Before(e.Stop))
}

// Status is the experiment's state at now: "scheduled", "running" or
// "stopped".
func (e Experiment) Status(now time.Time) string {
	switch {
	case now.Before(e.Start):
		return "scheduled"
	case e.Running(now):
		return "running"
	}
	return "stopped"
}

// Admits reports whether s is eligible for e.
func (e Experiment) Admits(s Subject) bool {
	if len(e.Eligible.Currencies) > 0 && !slices.Contains(e.Eligible.Currencies, s.Currency) {
		return false
	}
	if e.Policy == PolicyRouting {
		return true // a binding has no subscription yet: no interval, no creation time
	}
	if len(e.Eligible.Intervals) > 0 && !slices.Contains(e.Eligible.Intervals, s.Interval) {
		return false
	}
	return e.Eligible.CreatedAfter.IsZero() || s.CreatedAt.After(e.Eligible.CreatedAfter)
}

// Arm returns the arm named name; ok is false when e has none.
func (e Experiment) Arm(name string) (Arm, bool) {
	for _, a := range e.Arms {
		if a.Name == name {
			return a, true
		}
	}
	return Arm{}, false
}

// ArmNames are e's arms' names, control first.
func (e Experiment) ArmNames() []string {
	names := make([]string, len(e.Arms))
	for i, a := range e.Arms {
		names[i] = a.Name
	}
	return names
}

// subjectKey is the identifier assignment hashes: the customer for a
// routing experiment, the subscription for the others.
func (e Experiment) subjectKey(s Subject) string {
	if e.Policy == PolicyRouting {
		return s.CustomerID
	}
	return s.SubscriptionID
}
