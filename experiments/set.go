package experiments

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"
)

// Set is the experiments a node runs and the OpenFeature client that picks
// their arms. A nil Set runs none: every decision takes the default policy.
type Set struct {
	list  []Experiment
	byKey map[string]Experiment
	api   *openfeature.EvaluationAPI
	flags *openfeature.Client
}

// NewSet makes a Set of list that evaluates its flags with the in-process
// [Provider]. The OpenFeature API is an isolated instance, not the SDK's
// global one, so that several nodes in one process (tests) and other
// libraries' flags stay apart.
func NewSet(list []Experiment) *Set {
	s := &Set{list: list, byKey: make(map[string]Experiment, len(list)), api: isolated.NewAPI()}
	for _, e := range list {
		s.byKey[e.Key] = e
	}
	s.flags = s.api.NewClient()
	// The in-process provider is ready at once: it has nothing to load.
	if err := s.api.SetProviderAndWait(context.Background(), NewProvider(list)); err != nil {
		panic(fmt.Sprintf("experiments: the in-process provider failed to start: %v", err))
	}
	return s
}

// UseProvider evaluates the arms through provider instead (an operator's
// own flag service): it answers the flag named after each experiment's key,
// for the subject as targeting key, with an arm's name. rebill still
// applies eligibility, the time window and the guard rails, and takes an
// arm it does not know as control.
func (s *Set) UseProvider(ctx context.Context, provider openfeature.FeatureProvider) error {
	if err := s.api.SetProviderAndWait(ctx, provider); err != nil {
		return fmt.Errorf("experiments: start flag provider %s: %w", provider.Metadata().Name, err)
	}
	return nil
}

// List is every configured experiment, in file order.
func (s *Set) List() []Experiment {
	if s == nil {
		return nil
	}
	return slices.Clone(s.list)
}

// Get is the experiment with key.
func (s *Set) Get(key string) (Experiment, bool) {
	if s == nil {
		return Experiment{}, false
	}
	e, ok := s.byKey[key]
	return e, ok
}

// Assign returns rec (a subject's recorded arms, by experiment key) with
// an arm added for every experiment of one of policies that is running at
// now, admits subj and is not yet recorded, and whether it added any. A
// recorded arm is never changed: the record rules. A flag that cannot be
// evaluated (an outside provider down) assigns nothing, and the subject
// keeps the default policy until a later decision assigns it.
func (s *Set) Assign(ctx context.Context, subj Subject, rec map[string]string, now time.Time, policies ...Policy) (map[string]string, bool) {
	if s == nil {
		return rec, false
	}
	var out map[string]string
	for _, e := range s.list {
		if _, done := rec[e.Key]; done || !slices.Contains(policies, e.Policy) || !e.Running(now) || !e.Admits(subj) {
			continue
		}
		arm, ok := s.evaluate(ctx, e, subj)
		if !ok {
			continue
		}
		if out == nil {
			out = maps.Clone(rec)
			if out == nil {
				out = map[string]string{}
			}
		}
		out[e.Key] = arm
	}
	if out == nil {
		return rec, false
	}
	return out, true
}

// evaluate picks subj's arm of e through the flag client.
func (s *Set) evaluate(ctx context.Context, e Experiment, subj Subject) (string, bool) {
	evalCtx := openfeature.NewEvaluationContext(e.subjectKey(subj), map[string]any{
		"policy": string(e.Policy), "customer_id": subj.CustomerID, "currency": subj.Currency, "interval": subj.Interval,
	})
	d, err := s.flags.StringValueDetails(ctx, e.Key, Control, evalCtx)
	if err != nil {
		return "", false
	}
	if _, known := e.Arm(d.Value); !known {
		return Control, true
	}
	return d.Value, true
}

// Governing is the running experiment of policy that rec names and the
// arm rec gives it; ok is false when none governs (no record, the
// experiment stopped or was removed, or the arm is control or was
// removed): the default policy applies.
func (s *Set) Governing(policy Policy, rec map[string]string, now time.Time) (Experiment, Arm, bool) {
	if s == nil || len(rec) == 0 {
		return Experiment{}, Arm{}, false
	}
	for key, name := range rec {
		e, ok := s.byKey[key]
		if !ok || e.Policy != policy || !e.Running(now) || name == Control {
			continue
		}
		if a, ok := e.Arm(name); ok {
			return e, a, true
		}
	}
	return Experiment{}, Arm{}, false
}

// MaxTimeout is the longest gateway timeout any arm sets, or def when
// longer: a charge job's timeout must let the longest call finish.
func (s *Set) MaxTimeout(def time.Duration) time.Duration {
	if s == nil {
		return def
	}
	for _, e := range s.list {
		for _, a := range e.Arms {
			def = max(def, a.Params.Timeout)
		}
	}
	return def
}

// Labels are the (experiment, arm) pairs of the configuration: the closed
// set metrics may carry.
func (s *Set) Labels() [][2]string {
	if s == nil {
		return nil
	}
	var out [][2]string
	for _, e := range s.list {
		for _, a := range e.Arms {
			out = append(out, [2]string{e.Key, a.Name})
		}
	}
	return out
}

// Known reports whether (key, arm) is in the configuration.
func (s *Set) Known(key, arm string) bool {
	e, ok := s.Get(key)
	if !ok {
		return false
	}
	_, ok = e.Arm(arm)
	return ok
}
