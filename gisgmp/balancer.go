package gisgmp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer spreads calls over the registry gateways and moves them off a
// degraded one: each call starts at the next gateway in turn, skips those
// that failed recently (unless every one did) and goes on to the next
// while a gateway answers that it did nothing.
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

// order is the gateways to try for one call: healthy ones first, from a
// rotating start, then the degraded ones.
func (b *Balancer) order() []Gateway {
	n := len(b.gateways)
	start := int(b.next.Add(1) % uint64(max(n, 1)))
	b.mu.Lock()
	defer b.mu.Unlock()
	var healthy, degraded []Gateway
	for i := 0; i < n; i++ {
		g := b.gateways[(start+i)%n]
		if at, ok := b.failedAt[g.Name()]; ok && b.Now().Sub(at) < b.Cooldown {
			degraded = append(degraded, g)
		} else {
			healthy = append(healthy, g)
		}
	}
	return append(healthy, degraded...)
}

func (b *Balancer) note(g Gateway, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome) {
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
		callCtx, cancel := context.WithTimeout(ctx, b.CallTimeout)
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
