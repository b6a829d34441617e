// Package fleet is the configured gateways as the charge pipeline and the
// routing of new cards see them: each behind its circuit breaker, with this
// node's view of its health, its terms (commission, currencies, hold
// lifetime, timeout), and the metrics and spans of every call made to it.
// It knows nothing of charges' states: the pipeline decides what a call
// means; this package decides whether a call may be made and records it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// ErrCircuitOpen: the gateway failed repeatedly and calls to it are paused.
// Jobs wait (snooze) instead of spending attempts; they are never re-routed
// to another gateway, which could not use the token.
var ErrCircuitOpen = errors.New("gateway circuit open")

// ErrUnknownGateway: a charge names a gateway that is not configured.
var ErrUnknownGateway = errors.New("unknown gateway")

// Gateways are the configured gateways, each behind its circuit breaker
// and with this node's view of its health. They look a charge's gateway up
// by name and do no routing: recurring charges are sticky, a charge always
// goes to the gateway that issued its token. Routing (RouteBinding) is for
// new card bindings only.
type Gateways struct {
	gateways map[string]*breakerGateway
	names    []string // in configuration order
	openFor  time.Duration
}

// Settings are what rebill knows of a gateway besides how to call it.
type Settings struct {
	Kind     string
	Priority int // lower first among equally cheap gateways
	// CommissionBPS is the commission in basis points by currency, "*"
	// for the others.
	CommissionBPS map[string]int64
	// Currencies the gateway takes; empty: any.
	Currencies []string
	// HoldLifetime is how long an authorization lasts at the gateway;
	// an older one is not captured but voided and placed again. Zero:
	// holds are captured however old (the gateway says when they lapse).
	HoldLifetime time.Duration
	// Timeout bounds each call to this gateway; zero: the pipeline's
	// CallTimeout.
	Timeout time.Duration
}

// Configured is a gateway with its settings.
type Configured struct {
	Gateway  gateway.Gateway
	Settings Settings
}

// Breaker is when a gateway's circuit opens: more than FailureRatio of the
// calls in the rolling Window failed to get an answer (unavailable or
// unknown outcome), with at least MinCalls calls in it, as the OpenAPI document's
// routing rule says. It stays open OpenFor, then lets one probe through.
// A few bad cards among many good ones do not open it.
type Breaker struct {
	Window       time.Duration
	MinCalls     uint32
	FailureRatio float64
	OpenFor      time.Duration
}

// DefaultBreaker is the OpenAPI document's rule (decision 30): over 50 % of at least 10 calls in the
// window, open about 5 s.
var DefaultBreaker = Breaker{Window: 30 * time.Second, MinCalls: 10, FailureRatio: 0.5, OpenFor: 5 * time.Second}

// New wraps each gateway in a circuit breaker, with default settings (no
// commission, any currency, no hold lifetime).
func New(gateways []gateway.Gateway, b Breaker) *Gateways {
	configured := make([]Configured, len(gateways))
	for i, g := range gateways {
		configured[i] = Configured{Gateway: g, Settings: Settings{Priority: i + 1}}
	}
	return Configure(configured, b)
}

// Configure wraps each gateway in a circuit breaker (sony/gobreaker, with
// its rolling window) and a health tracker, and keeps its settings.
func Configure(configured []Configured, b Breaker) *Gateways {
	r := &Gateways{gateways: map[string]*breakerGateway{}, openFor: b.OpenFor}
	for _, c := range configured {
		g := c.Gateway
		metrics.GatewayCircuitOpen.WithLabelValues(g.Name()).Set(0)
		zeroCallMetrics(g.Name())
		r.names = append(r.names, g.Name())
		r.gateways[g.Name()] = &breakerGateway{
			Gateway:  g,
			settings: c.Settings,
			health:   newHealthTracker(time.Now),
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

// Settings returns the named gateway's settings; ok is false when it is
// not configured.
func (r *Gateways) Settings(name string) (s Settings, ok bool) {
	g, ok := r.gateways[name]
	if !ok {
		return Settings{}, false
	}
	return g.settings, true
}

// Timeout is the call timeout of the named gateway: its own, or def.
func (r *Gateways) Timeout(name string, def time.Duration) time.Duration {
	if g, ok := r.gateways[name]; ok && g.settings.Timeout > 0 {
		return g.settings.Timeout
	}
	return def
}

// MaxTimeout is the longest call timeout of any gateway, def included: a
// job that makes calls to any of them must outlast it.
func (r *Gateways) MaxTimeout(def time.Duration) time.Duration {
	longest := def
	for _, g := range r.gateways {
		longest = max(longest, g.settings.Timeout)
	}
	return longest
}

// Health returns this node's view of the named gateway.
func (r *Gateways) Health(name string) (Health, bool) {
	g, ok := r.gateways[name]
	if !ok {
		return Health{}, false
	}
	h := g.health.snapshot()
	switch g.breaker.State() {
	case gobreaker.StateOpen:
		h.Circuit = CircuitOpen
	case gobreaker.StateHalfOpen:
		h.Circuit = CircuitHalfOpen
	default:
		h.Circuit = CircuitClosed
	}
	return h, true
}

// ReportHealth makes these gateways the source of the rebill_gateway_*
// gauges of this process.
func (r *Gateways) ReportHealth() {
	metrics.ReportGatewayHealth(func() []metrics.GatewayHealth {
		list := r.List()
		out := make([]metrics.GatewayHealth, len(list))
		for i, g := range list {
			out[i] = metrics.GatewayHealth{Gateway: g.Name, Calls: g.Health.Calls, ErrorRate: g.Health.ErrorRate,
				TimeoutRate: g.Health.TimeoutRate, P50Seconds: g.Health.P50.Seconds(), P95Seconds: g.Health.P95.Seconds(),
				LatencyCount: g.Health.CallsSinceStart, LatencySumSeconds: g.Health.LatencySinceStart.Seconds(),
				CircuitOpen: g.Health.Circuit == CircuitOpen, HalfOpen: g.Health.Circuit == CircuitHalfOpen}
		}
		return out
	})
}

// GatewayStatus is a configured gateway with its settings and health.
type GatewayStatus struct {
	Name string
	Settings
	Health Health
}

// List returns every configured gateway, in configuration order, with
// this node's view of its health.
func (r *Gateways) List() []GatewayStatus {
	out := make([]GatewayStatus, 0, len(r.names))
	for _, name := range r.names {
		h, _ := r.Health(name)
		out = append(out, GatewayStatus{Name: name, Settings: r.gateways[name].settings, Health: h})
	}
	return out
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
	settings Settings
	health   *healthTracker
	breaker  *gobreaker.CircuitBreaker[gateway.Result]
}

// guard runs one call through the breaker and records it in the health
// window; a call the open circuit refused was not made and is not counted.
func (b *breakerGateway) guard(fn func() (gateway.Result, error)) (gateway.Result, error) {
	res, err := b.breaker.Execute(func() (gateway.Result, error) {
		start := time.Now() // a latency: elapsed real time, which the dev clock does not measure
		res, err := fn()
		b.health.observe(time.Since(start), err)
		return res, err
	})
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

func (b *breakerGateway) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Refund(ctx, req) })
}

func (b *breakerGateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	return b.guard(func() (gateway.Result, error) { return b.Gateway.Lookup(ctx, req) })
}
