package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/metrics"
)

// ErrCircuitOpen: the gateway failed repeatedly and calls to it are paused.
// Jobs wait (snooze) instead of spending attempts; they are never re-routed
// to another gateway, which could not use the token.
var ErrCircuitOpen = errors.New("gateway circuit open")

// ErrUnknownGateway: a charge names a gateway that is not configured.
var ErrUnknownGateway = errors.New("unknown gateway")

// Gateways are the configured gateways, each behind its circuit breaker.
// They look a charge's gateway up by name and do no routing: recurring
// charges are sticky, a charge always goes to the gateway that issued its
// token.
type Gateways struct {
	gateways map[string]*breakerGateway
	openFor  time.Duration
}

// Breaker is when a gateway's circuit opens: more than FailureRatio of the
// calls in the rolling Window failed to get an answer (unavailable or
// unknown outcome), with at least MinCalls calls in it, as API.md's
// routing rule says. It stays open OpenFor, then lets one probe through.
// A few bad cards among many good ones do not open it.
type Breaker struct {
	Window       time.Duration
	MinCalls     uint32
	FailureRatio float64
	OpenFor      time.Duration
}

// DefaultBreaker is API.md's rule: over 50 % of at least 10 calls in the
// window, open about 5 s.
var DefaultBreaker = Breaker{Window: 30 * time.Second, MinCalls: 10, FailureRatio: 0.5, OpenFor: 5 * time.Second}

// NewGateways wraps each gateway in a circuit breaker (sony/gobreaker, with
// its rolling window).
func NewGateways(gateways []gateway.Gateway, b Breaker) *Gateways {
	r := &Gateways{gateways: map[string]*breakerGateway{}, openFor: b.OpenFor}
	for _, g := range gateways {
		metrics.GatewayCircuitOpen.WithLabelValues(g.Name()).Set(0)
		r.gateways[g.Name()] = &breakerGateway{
			Gateway: g,
			breaker: gobreaker.NewCircuitBreaker[gateway.Result](gobreaker.Settings{
				Name:         g.Name(),
				MaxRequests:  1,
				Interval:     b.Window,
				BucketPeriod: b.Window / 10,
				Timeout:      b.OpenFor,
				ReadyToTrip: func(c gobreaker.Counts) bool {
					return c.Requests >= b.MinCalls && float64(c.TotalFailures) > b.FailureRatio*float64(c.Requests)
				},
				// Declines and refusals are answers, not outages.
				IsSuccessful: func(err error) bool {
					return err == nil || !(errors.Is(err, gateway.ErrUnavailable) || errors.Is(err, gateway.ErrUnknownOutcome))
				},
				OnStateChange: func(name string, _, to gobreaker.State) {
					open := 0.0
					if to == gobreaker.StateOpen {
						open = 1
					}
					metrics.GatewayCircuitOpen.WithLabelValues(name).Set(open)
				},
			}),
		}
	}
	return r
}

// OpenFor is how long an open circuit stays open before a probe.
func (r *Gateways) OpenFor() time.Duration { return r.openFor }

// Known reports whether name is a configured gateway.
func (r *Gateways) Known(name string) bool { _, ok := r.gateways[name]; return ok }

// CircuitOpen reports whether calls to the named gateway are paused.
func (r *Gateways) CircuitOpen(name string) bool {
	g, ok := r.gateways[name]
	return ok && g.breaker.State() == gobreaker.StateOpen
}

// Gateway returns the named gateway behind its breaker.
func (r *Gateways) Gateway(name string) (gateway.Gateway, error) {
	g, ok := r.gateways[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownGateway, name)
	}
	return g, nil
}

type breakerGateway struct {
	gateway.Gateway
	breaker *gobreaker.CircuitBreaker[gateway.Result]
}

func (b *breakerGateway) guard(fn func() (gateway.Result, error)) (gateway.Result, error) {
	res, err := b.breaker.Execute(fn)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return gateway.Result{}, fmt.Errorf("%s: %w", b.Name(), ErrCircuitOpen)
	}
	return res, err
}

func (b *breakerGateway) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Authorize(ctx, req) })
}

func (b *breakerGateway) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Capture(ctx, req) })
}

func (b *breakerGateway) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Void(ctx, req) })
}

func (b *breakerGateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Lookup(ctx, req) })
}
