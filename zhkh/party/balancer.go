package party

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer spreads calls over the parties and moves them off a degraded
// one, as registry.Balancer does for GIS GMP: each call starts at the next
// party in turn among those of the lowest priority, skips parties that
// failed within Cooldown (the circuit: open while a party does not
// answer) unless every one did, and goes on to the next while a party
// answers that it did nothing.
type Balancer struct {
	parties []Party
	next    atomic.Uint64
	// Cooldown is how long a party that did not answer is skipped.
	Cooldown time.Duration
	// CallTimeout bounds every call; past it the outcome is unknown.
	CallTimeout time.Duration
	Now         func() time.Time

	mu       sync.Mutex
	failedAt map[string]time.Time
}

// NewBalancer balances over parties.
func NewBalancer(parties []Party, callTimeout time.Duration) *Balancer {
	return &Balancer{parties: parties, Cooldown: 30 * time.Second, CallTimeout: callTimeout, Now: time.Now,
		failedAt: map[string]time.Time{}}
}

// Settings are what a deployment says of one party.
type Settings struct {
	// Priority orders the parties: lower first; equal ones take turns.
	Priority int
	// Timeout bounds the party's calls instead of CallTimeout; zero:
	// CallTimeout.
	Timeout time.Duration
}

// WithSettings is p with its settings, for a Balancer.
func WithSettings(p Party, s Settings) Party { return settled{Party: p, settings: s} }

type settled struct {
	Party
	settings Settings
}

func settingsOf(p Party) Settings {
	if s, ok := p.(settled); ok {
		return s.settings
	}
	return Settings{}
}

// Names lists the parties.
func (b *Balancer) Names() []string {
	out := make([]string, len(b.parties))
	for i, p := range b.parties {
		out[i] = p.Name()
	}
	return out
}

func (b *Balancer) order() []Party {
	turn := b.next.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	var healthy, degraded []Party
	for _, p := range b.parties {
		if at, ok := b.failedAt[p.Name()]; ok && b.Now().Sub(at) < b.Cooldown {
			degraded = append(degraded, p)
		} else {
			healthy = append(healthy, p)
		}
	}
	return append(inTurn(healthy, turn), inTurn(degraded, turn)...)
}

func inTurn(ps []Party, turn uint64) []Party {
	slices.SortStableFunc(ps, func(x, y Party) int { return cmp.Compare(settingsOf(x).Priority, settingsOf(y).Priority) })
	out := make([]Party, 0, len(ps))
	for i := 0; i < len(ps); {
		j := i
		for j < len(ps) && settingsOf(ps[j]).Priority == settingsOf(ps[i]).Priority {
			j++
		}
		run := ps[i:j]
		k := int(turn % uint64(len(run)))
		out = append(append(out, run[k:]...), run[:k]...)
		i = j
	}
	return out
}

// note records whether p answered: a pending answer is an answer.
func (b *Balancer) note(p Party, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, pending := Pending(err); !pending && (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome)) {
		b.failedAt[p.Name()] = b.Now()
	} else {
		delete(b.failedAt, p.Name())
	}
}

func (b *Balancer) each(ctx context.Context, fn func(ctx context.Context, p Party) error) (string, error) {
	if len(b.parties) == 0 {
		return "", fmt.Errorf("%w: no GIS ZhKH party configured", ErrUnavailable)
	}
	var last error
	for _, p := range b.order() {
		timeout := b.CallTimeout
		if t := settingsOf(p).Timeout; t > 0 {
			timeout = t
		}
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		err := fn(callCtx, p)
		if err != nil && callCtx.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %s timed out: %w", ErrUnknownOutcome, p.Name(), err)
		}
		cancel()
		b.note(p, err)
		if !errors.Is(err, ErrUnavailable) {
			return p.Name(), err
		}
		last = err
	}
	return "", last
}

// Report reports p through the first party that does something, and
// names it.
func (b *Balancer) Report(ctx context.Context, p Payment) (string, error) {
	return b.each(ctx, func(ctx context.Context, pt Party) error { return pt.Report(ctx, p) })
}

// Cancel annuls a report through the first party that does something.
func (b *Balancer) Cancel(ctx context.Context, reportID string) (string, error) {
	return b.each(ctx, func(ctx context.Context, pt Party) error { return pt.Cancel(ctx, reportID) })
}

// Lookup asks the first party that answers what it holds under reportID.
func (b *Balancer) Lookup(ctx context.Context, reportID string) (Status, string, error) {
	var status Status
	var reason string
	_, err := b.each(ctx, func(ctx context.Context, pt Party) error {
		var lerr error
		status, reason, lerr = pt.Lookup(ctx, reportID)
		return lerr
	})
	return status, reason, err
}
