package registry

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

// Balancer spreads calls over the registry gateways and moves them off a
// degraded one: each call starts at the next gateway in turn, skips those
// that failed recently (unless every one did) and goes on to the next
// while a gateway answers that it did nothing. Gateways with a priority
// (see WithSettings) are tried lower priority first, in turn among equals.
type Balancer struct {
	gateways []Gateway
	next     atomic.Uint64
	// Cooldown is how long a gateway that did not answer is skipped.
	Cooldown time.Duration
	// CallTimeout bounds every call; past it the outcome is unknown.
	CallTimeout time.Duration
	Now         func() time.Time

	mu       sync.Mutex
	failedAt map[string]time.Time
}

// NewBalancer balances over gateways.
func NewBalancer(gateways []Gateway, callTimeout time.Duration) *Balancer {
	return &Balancer{gateways: gateways, Cooldown: 30 * time.Second, CallTimeout: callTimeout, Now: time.Now,
		failedAt: map[string]time.Time{}}
}

// Names lists the gateways.
func (b *Balancer) Names() []string {
	out := make([]string, len(b.gateways))
	for i, g := range b.gateways {
		out[i] = g.Name()
	}
	return out
}

// Gateways lists the gateways, each as configured (see Export).
func (b *Balancer) Gateways() []Gateway { return slices.Clone(b.gateways) }

// Settings are what a deployment says of one gateway.
type Settings struct {
	// Priority orders the gateways: lower first; equal ones take turns.
	Priority int
	// Timeout bounds the gateway's calls instead of the balancer's
	// CallTimeout; zero: CallTimeout.
	Timeout time.Duration
}

// WithSettings is g with its settings, for a Balancer.
func WithSettings(g Gateway, s Settings) Gateway { return settled{Gateway: g, settings: s} }

type settled struct {
	Gateway
	settings Settings
}

func settingsOf(g Gateway) Settings {
	if s, ok := g.(settled); ok {
		return s.settings
	}
	return Settings{}
}

// order is the gateways to try for one call: healthy ones first, then the
// degraded ones, each by priority, from a rotating start among equals.
func (b *Balancer) order() []Gateway {
	turn := b.next.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	var healthy, degraded []Gateway
	for _, g := range b.gateways {
		if at, ok := b.failedAt[g.Name()]; ok && b.Now().Sub(at) < b.Cooldown {
			degraded = append(degraded, g)
		} else {
			healthy = append(healthy, g)
		}
	}
	return append(inTurn(healthy, turn), inTurn(degraded, turn)...)
}

// inTurn orders gs by priority, each run of equal priority rotated by
// turn, so that equals take turns at being tried first.
func inTurn(gs []Gateway, turn uint64) []Gateway {
	slices.SortStableFunc(gs, func(x, y Gateway) int { return cmp.Compare(settingsOf(x).Priority, settingsOf(y).Priority) })
	out := make([]Gateway, 0, len(gs))
	for i := 0; i < len(gs); {
		j := i
		for j < len(gs) && settingsOf(gs[j]).Priority == settingsOf(gs[i]).Priority {
			j++
		}
		run := gs[i:j]
		k := int(turn % uint64(len(run)))
		out = append(append(out, run[k:]...), run[:k]...)
		i = j
	}
	return out
}

// note records whether g answered: a pending answer is an answer.
func (b *Balancer) note(g Gateway, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, pending := Pending(err); !pending && (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome)) {
		b.failedAt[g.Name()] = b.Now()
	} else {
		delete(b.failedAt, g.Name())
	}
}

// each calls fn on gateways in order until one does something: returns
// the gateway that answered and its error, or ErrUnavailable when none
// would.
func (b *Balancer) each(ctx context.Context, fn func(ctx context.Context, g Gateway) error) (string, error) {
	if len(b.gateways) == 0 {
		return "", fmt.Errorf("%w: no registry gateway configured", ErrUnavailable)
	}
	var last error
	for _, g := range b.order() {
		timeout := b.CallTimeout
		if t := settingsOf(g).Timeout; t > 0 {
			timeout = t
		}
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		err := fn(callCtx, g)
		if err != nil && callCtx.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %s timed out: %w", ErrUnknownOutcome, g.Name(), err)
		}
		cancel()
		b.note(g, err)
		if !errors.Is(err, ErrUnavailable) {
			return g.Name(), err
		}
		last = err
	}
	return "", last
}

// Post posts p through the first gateway that does something.
func (b *Balancer) Post(ctx context.Context, p Payment) (string, error) {
	return b.each(ctx, func(ctx context.Context, g Gateway) error { return g.Post(ctx, p) })
}

// Annul annuls a payment through the first gateway that does something.
func (b *Balancer) Annul(ctx context.Context, paymentID string) (string, error) {
	return b.each(ctx, func(ctx context.Context, g Gateway) error { return g.Annul(ctx, paymentID) })
}

// Lookup asks the first gateway that answers whether the registry holds
// the payment.
func (b *Balancer) Lookup(ctx context.Context, paymentID string) (found, annulled bool, err error) {
	_, err = b.each(ctx, func(ctx context.Context, g Gateway) error {
		var lerr error
		found, annulled, lerr = g.Lookup(ctx, paymentID)
		return lerr
	})
	return found, annulled, err
}

// Quittance asks the first gateway that answers what the registry holds
// against uin.
func (b *Balancer) Quittance(ctx context.Context, uin string) (Quittance, error) {
	var q Quittance
	_, err := b.each(ctx, func(ctx context.Context, g Gateway) error {
		var qerr error
		q, qerr = g.Quittance(ctx, uin)
		return qerr
	})
	return q, err
}
