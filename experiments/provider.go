package experiments

import (
	"context"
	"crypto/sha256"
	"encoding/binary"

	"github.com/open-feature/go-sdk/openfeature"
)

// Provider is the OpenFeature provider of the experiments file: in
// process, with nothing to fetch, it answers the string flag named after
// an experiment's key with the arm [Bucket] picks for the evaluation
// context's targeting key. Only string flags exist; the others answer
// their default with FLAG_NOT_FOUND.
type Provider struct {
	byKey map[string]Experiment
}

// NewProvider serves list's experiments as flags.
func NewProvider(list []Experiment) *Provider {
	p := &Provider{byKey: make(map[string]Experiment, len(list))}
	for _, e := range list {
		p.byKey[e.Key] = e
	}
	return p
}

// Bucket picks the arm of e for subject by weight from a hash of
// (experiment key, subject): the same on every node and after every
// restart, and independent between experiments, since the key is hashed
// in. SHA-256's first 8 bytes are uniform; the modulo's bias over a total
// weight of at most 10,000 per arm is below 10^-14.
func Bucket(e Experiment, subject string) string {
	total := 0
	for _, a := range e.Arms {
		total += a.Weight
	}
	if total == 0 {
		return Control
	}
	sum := sha256.Sum256([]byte(e.Key + "\x00" + subject))
	n := int(binary.BigEndian.Uint64(sum[:8]) % uint64(total))
	for _, a := range e.Arms {
		if n < a.Weight {
			return a.Name
		}
		n -= a.Weight
	}
	return Control
}

// Metadata implements openfeature.FeatureProvider.
func (p *Provider) Metadata() openfeature.Metadata {
	return openfeature.Metadata{Name: "rebill-experiments-file"}
}

// Hooks implements openfeature.FeatureProvider.
func (p *Provider) Hooks() []openfeature.Hook { return nil }

// StringEvaluation answers an experiment's flag with an arm's name.
func (p *Provider) StringEvaluation(_ context.Context, flag string, defaultValue string, flatCtx openfeature.FlattenedContext) openfeature.StringResolutionDetail {
	e, ok := p.byKey[flag]
	if !ok {
		return openfeature.StringResolutionDetail{Value: defaultValue, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewFlagNotFoundResolutionError("no experiment " + flag), Reason: openfeature.ErrorReason}}
	}
	subject, _ := flatCtx[openfeature.TargetingKey].(string)
	if subject == "" {
		return openfeature.StringResolutionDetail{Value: defaultValue, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewTargetingKeyMissingResolutionError("an arm is picked per subject"), Reason: openfeature.ErrorReason}}
	}
	arm := Bucket(e, subject)
	return openfeature.StringResolutionDetail{Value: arm, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
		Reason: openfeature.SplitReason, Variant: arm}}
}

func notFound(flag string) openfeature.ProviderResolutionDetail {
	return openfeature.ProviderResolutionDetail{
		ResolutionError: openfeature.NewFlagNotFoundResolutionError("experiments are string flags: " + flag), Reason: openfeature.ErrorReason}
}

// BooleanEvaluation implements openfeature.FeatureProvider: no such flags.
func (p *Provider) BooleanEvaluation(_ context.Context, flag string, defaultValue bool, _ openfeature.FlattenedContext) openfeature.BoolResolutionDetail {
	return openfeature.BoolResolutionDetail{Value: defaultValue, ProviderResolutionDetail: notFound(flag)}
}

// FloatEvaluation implements openfeature.FeatureProvider: no such flags.
func (p *Provider) FloatEvaluation(_ context.Context, flag string, defaultValue float64, _ openfeature.FlattenedContext) openfeature.FloatResolutionDetail {
	return openfeature.FloatResolutionDetail{Value: defaultValue, ProviderResolutionDetail: notFound(flag)}
}

// IntEvaluation implements openfeature.FeatureProvider: no such flags.
func (p *Provider) IntEvaluation(_ context.Context, flag string, defaultValue int64, _ openfeature.FlattenedContext) openfeature.IntResolutionDetail {
	return openfeature.IntResolutionDetail{Value: defaultValue, ProviderResolutionDetail: notFound(flag)}
}

// ObjectEvaluation implements openfeature.FeatureProvider: no such flags.
func (p *Provider) ObjectEvaluation(_ context.Context, flag string, defaultValue any, _ openfeature.FlattenedContext) openfeature.InterfaceResolutionDetail {
	return openfeature.InterfaceResolutionDetail{Value: defaultValue, ProviderResolutionDetail: notFound(flag)}
}
