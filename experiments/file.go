package experiments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/subscriptions/period"
)

// Limits are the guard rails every arm is checked against when the file is
// read: what keeps money safe is not an experiment's to change.
type Limits struct {
	// DunningMax: every retry of a dunning arm (moved to its hour) falls
	// within this of the first decline.
	DunningMax time.Duration
	// MaxAttempts is how many attempts a charge may make within
	// DunningMax: the first, and a dunning arm's retries.
	MaxAttempts int
	// TimeoutFits says why a gateway timeout would not fit the job-rescue
	// setting (River would rescue a job still calling the gateway); nil
	// error: it fits.
	TimeoutFits func(time.Duration) error
	// Gateways are the configured gateways' names, which a priority
	// routing arm may list.
	Gateways []string
}

// Decision 7 of the OpenAPI document: at most 15 attempts per charge in 30
// days (card-network retry rules).
const (
	DecisionSevenAttempts = 15
	DecisionSevenWindow   = 30 * 24 * time.Hour
)

// DefaultMinPerArm is the fixed horizon when an experiment names none.
const DefaultMinPerArm = 1000

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

type fileExperiment struct {
	Key         string        `json:"key"`
	Description string        `json:"description"`
	Policy      string        `json:"policy"`
	Start       string        `json:"start"`
	Stop        string        `json:"stop"`
	MinPerArm   *int64        `json:"min_per_arm"`
	Eligible    *fileEligible `json:"eligible"`
	Arms        []fileArm     `json:"arms"`
}

type fileEligible struct {
	Currencies   []string `json:"currencies"`
	Intervals    []string `json:"intervals"`
	CreatedAfter string   `json:"created_after"`
}

type fileArm struct {
	Name      string   `json:"name"`
	Weight    *int     `json:"weight"`
	Dunning   []string `json:"dunning"`
	Hour      *int     `json:"hour"`
	Timeout   string   `json:"timeout"`
	RetryBase string   `json:"retry_base"`
	RetryMax  string   `json:"retry_max"`
	Rule      string   `json:"rule"`
	Priority  []string `json:"priority"`
	Upcoming  string   `json:"upcoming"`
}

// Parse reads an experiments file (a JSON or YAML list of experiments) and
// checks every experiment and arm against lim. The error has one line per
// fault, each naming the experiment (and arm) and the field, so that one
// start reports them all.
func Parse(raw []byte, lim Limits) (*Set, error) {
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("neither JSON nor YAML: %w", err)
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("want a list of experiments: %w", err)
	}
	var (
		out  []Experiment
		errs []error
		seen = map[string]int{}
	)
	for i, raw := range entries {
		e, faults := parseExperiment(raw, lim)
		where := fmt.Sprintf("experiment #%d", i+1)
		if e.Key != "" {
			where = fmt.Sprintf("experiment %q", e.Key)
			if first, dup := seen[e.Key]; dup {
				faults = append(faults, fmt.Errorf("key: already used by experiment #%d", first+1))
			}
			seen[e.Key] = i
		}
		if len(faults) == 0 {
			for _, other := range out {
				if overlaps(other, e) {
					faults = append(faults, fmt.Errorf("varies %s for subscriptions experiment %q also varies at the same time: give them disjoint times or currencies",
						e.Policy, other.Key))
				}
			}
		}
		for _, f := range faults {
			errs = append(errs, fmt.Errorf("%s: %w", where, f))
		}
		if len(faults) == 0 {
			out = append(out, e)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewSet(out), nil
}

// overlaps reports whether a and b could both govern one subscription's
// policy at one time: the same policy, windows that meet, and currencies
// that are not disjoint.
func overlaps(a, b Experiment) bool {
	if a.Policy != b.Policy {
		return false
	}
	if (!a.Stop.IsZero() && !a.Stop.After(b.Start)) || (!b.Stop.IsZero() && !b.Stop.After(a.Start)) {
		return false
	}
	if len(a.Eligible.Currencies) == 0 || len(b.Eligible.Currencies) == 0 {
		return true
	}
	return slices.ContainsFunc(a.Eligible.Currencies, func(c string) bool { return slices.Contains(b.Eligible.Currencies, c) })
}

func parseExperiment(raw json.RawMessage, lim Limits) (Experiment, []error) {
	var f fileExperiment
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		// The key, if any, still names the experiment in the message.
		_ = json.Unmarshal(raw, &f)
		return Experiment{Key: f.Key}, []error{err}
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	e := Experiment{Key: f.Key, Description: f.Description, Policy: Policy(f.Policy), MinPerArm: DefaultMinPerArm}
	if !nameRE.MatchString(f.Key) {
		add("key: want 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit")
	}
	if !slices.Contains(Policies, e.Policy) {
		add("policy: want one of %s", joinPolicies())
	}
	var err error
	if e.Start, err = time.Parse(time.RFC3339, f.Start); err != nil {
		add("start: want an RFC 3339 time, e.g. 2027-01-01T00:00:00Z")
	}
	if f.Stop != "" {
		if e.Stop, err = time.Parse(time.RFC3339, f.Stop); err != nil {
			add("stop: want an RFC 3339 time, e.g. 2027-03-01T00:00:00Z")
		} else if !e.Start.IsZero() && !e.Stop.After(e.Start) {
			add("stop: must be after start")
		}
	}
	if f.MinPerArm != nil {
		if *f.MinPerArm < 1 {
			add("min_per_arm: must be at least 1")
		}
		e.MinPerArm = *f.MinPerArm
	}
	if f.Eligible != nil {
		e.Eligible, errs = parseEligible(*f.Eligible, e.Policy, errs)
	}
	e.Arms, errs = parseArms(f.Arms, e.Policy, lim, errs)
	return e, errs
}

func parseEligible(f fileEligible, policy Policy, errs []error) (Eligibility, []error) {
	el := Eligibility{Currencies: f.Currencies, Intervals: f.Intervals}
	for _, c := range f.Currencies {
		if _, ok := validate.Currency(c); !ok {
			errs = append(errs, fmt.Errorf("eligible.currencies: %q is not an active ISO 4217 code in upper case", c))
		}
	}
	for _, iv := range f.Intervals {
		if _, err := period.ParseInterval(iv); err != nil {
			errs = append(errs, fmt.Errorf("eligible.intervals: %q is not day, week, month, quarter or year", iv))
		}
	}
	if f.CreatedAfter != "" {
		t, err := time.Parse(time.RFC3339, f.CreatedAfter)
		if err != nil {
			errs = append(errs, fmt.Errorf("eligible.created_after: want an RFC 3339 time"))
		}
		el.CreatedAfter = t
	}
	if policy == PolicyRouting && (len(f.Intervals) > 0 || f.CreatedAfter != "") {
		errs = append(errs, fmt.Errorf("eligible: a routing experiment assigns customers before they have a subscription: only currencies apply"))
	}
	return el, errs
}

func parseArms(arms []fileArm, policy Policy, lim Limits, errs []error) ([]Arm, []error) {
	if len(arms) < 2 {
		return nil, append(errs, fmt.Errorf("arms: want a %q arm and at least one treatment", Control))
	}
	out := make([]Arm, 0, len(arms))
	total, names := 0, map[string]bool{}
	for i, fa := range arms {
		where := fmt.Sprintf("arm #%d", i+1)
		if fa.Name != "" {
			where = fmt.Sprintf("arm %q", fa.Name)
		}
		a, faults := parseArm(fa, policy, lim)
		if names[fa.Name] {
			faults = append(faults, fmt.Errorf("name: already used"))
		}
		names[fa.Name] = true
		for _, f := range faults {
			errs = append(errs, fmt.Errorf("%s: %w", where, f))
		}
		total += a.Weight
		out = append(out, a)
	}
	if !names[Control] {
		errs = append(errs, fmt.Errorf("arms: want an arm named %q (the default policy)", Control))
	}
	if total < 1 {
		errs = append(errs, fmt.Errorf("arms: the weights add up to 0"))
	}
	slices.SortStableFunc(out, func(a, b Arm) int { // control first, then as written
		if a.Name == Control {
			return -1
		}
		if b.Name == Control {
			return 1
		}
		return 0
	})
	return out, errs
}

func parseArm(f fileArm, policy Policy, lim Limits) (Arm, []error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	a := Arm{Name: f.Name}
	if !nameRE.MatchString(f.Name) {
		add("name: want 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit")
	}
	if f.Weight == nil || *f.Weight < 0 || *f.Weight > 10_000 {
		add("weight: want an integer from 0 to 10000")
	} else {
		a.Weight = *f.Weight
	}
	set := map[Policy][]string{}
	note := func(p Policy, field string, present bool) {
		if present {
			set[p] = append(set[p], field)
		}
	}
	note(PolicyDunning, "dunning", f.Dunning != nil)
	note(PolicyDunning, "hour", f.Hour != nil)
	note(PolicyGatewayTimeout, "timeout", f.Timeout != "")
	note(PolicyGatewayTimeout, "retry_base", f.RetryBase != "")
	note(PolicyGatewayTimeout, "retry_max", f.RetryMax != "")
	note(PolicyRouting, "rule", f.Rule != "")
	note(PolicyRouting, "priority", f.Priority != nil)
	note(PolicyNoticeLead, "upcoming", f.Upcoming != "")
	for _, p := range Policies {
		for _, field := range set[p] {
			switch {
			case f.Name == Control:
				add("%s: the control arm is the default policy and sets nothing", field)
			case p != policy:
				add("%s: not a parameter of a %s experiment", field, policy)
			}
		}
	}
	if f.Name == Control {
		return a, errs
	}
	if len(set[policy]) == 0 {
		add("sets none of the %s parameters: it would be a second control", policy)
		return a, errs
	}
	switch policy {
	case PolicyDunning:
		a.Params, errs = dunningArm(f, lim, errs)
	case PolicyGatewayTimeout:
		a.Params, errs = timeoutArm(f, lim, errs)
	case PolicyRouting:
		a.Params, errs = routingArm(f, lim, errs)
	case PolicyNoticeLead:
		d, err := ParseDuration(f.Upcoming)
		if err != nil || d < time.Hour || d > 31*24*time.Hour {
			errs = append(errs, fmt.Errorf("upcoming: want a duration from 1h to 31d"))
		}
		a.Params.Upcoming = d
	}
	return a, errs
}

func dunningArm(f fileArm, lim Limits, errs []error) (Params, []error) {
	var p Params
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.Hour != nil && (*f.Hour < 0 || *f.Hour > 23) {
		add("hour: want 0 to 23")
	}
	if f.Dunning == nil {
		add("dunning: want the retries' offsets from the first decline, e.g. [1d, 3d, 5d]")
		return p, errs
	}
	for i, s := range f.Dunning {
		d, err := ParseDuration(s)
		if err != nil || d <= 0 {
			add("dunning[%d]: want a positive duration, e.g. 36h or 3d", i)
			return p, errs
		}
		if i > 0 && d <= p.Dunning[i-1] {
			add("dunning[%d]: the offsets must increase", i)
			return p, errs
		}
		p.Dunning = append(p.Dunning, d)
	}
	if max := lim.MaxAttempts - 1; len(p.Dunning) > max {
		add("dunning: %d retries, but a charge may make at most %d attempts (decision 7)", len(p.Dunning), lim.MaxAttempts)
	}
	if f.Hour != nil {
		p.Hour = f.Hour
		for i := 1; i < len(p.Dunning); i++ {
			if p.Dunning[i]-p.Dunning[i-1] < 24*time.Hour {
				add("dunning[%d]: retries moved to an hour of day must be at least 24h apart, or two would run at once", i)
				break
			}
		}
	}
	if n := len(p.Dunning); n > 0 {
		last, reach := p.Dunning[n-1], ""
		if p.Hour != nil {
			last += 24 * time.Hour // moving a retry to its hour can add up to a day
			reach = " (with up to a day to reach its hour)"
		}
		if last > lim.DunningMax {
			add("dunning: the last retry%s may run %s after the first decline, past the maximum of %s (REBILL_DUNNING_MAX)",
				reach, last, lim.DunningMax)
		}
	}
	return p, errs
}

func timeoutArm(f fileArm, lim Limits, errs []error) (Params, []error) {
	var p Params
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	durations := []struct {
		field string
		raw   string
		into  *time.Duration
	}{{"timeout", f.Timeout, &p.Timeout}, {"retry_base", f.RetryBase, &p.RetryBase}, {"retry_max", f.RetryMax, &p.RetryMax}}
	for _, d := range durations {
		if d.raw == "" {
			continue
		}
		v, err := ParseDuration(d.raw)
		if err != nil || v < 100*time.Millisecond || v > time.Hour {
			add("%s: want a duration from 100ms to 1h", d.field)
			continue
		}
		*d.into = v
	}
	if p.Timeout > 0 && lim.TimeoutFits != nil {
		if err := lim.TimeoutFits(p.Timeout); err != nil {
			add("timeout: %v", err)
		}
	}
	if p.RetryBase > 0 && p.RetryMax > 0 && p.RetryMax < p.RetryBase {
		add("retry_max: must not be less than retry_base")
	}
	return p, errs
}

func routingArm(f fileArm, lim Limits, errs []error) (Params, []error) {
	p := Params{Rule: f.Rule, Priority: f.Priority}
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch f.Rule {
	case RouteCheapest, RouteHealthiest:
		if f.Priority != nil {
			add("priority: only a %q rule takes a list", RoutePriority)
		}
	case RoutePriority:
		if len(f.Priority) == 0 {
			add("priority: want the gateways in order")
		}
		seen := map[string]bool{}
		for _, g := range f.Priority {
			if seen[g] {
				add("priority: %q is listed twice", g)
			}
			seen[g] = true
			if lim.Gateways != nil && !slices.Contains(lim.Gateways, g) {
				add("priority: %q is not a configured gateway", g)
			}
		}
	default:
		add("rule: want %s, %s or %s", RouteCheapest, RouteHealthiest, RoutePriority)
	}
	return p, errs
}

// ParseDuration is time.ParseDuration that also takes whole days ("3d"):
// dunning schedules are written in days.
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 3650 {
			return 0, fmt.Errorf("bad number of days %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func joinPolicies() string {
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
