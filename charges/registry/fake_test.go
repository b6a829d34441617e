package registry_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rebill/rebill/charges/registry"
)

// registryCall is one call a fake registry gateway got.
type registryCall struct {
	Op        string // post, annul or lookup
	PaymentID string
	Payment   registry.Payment // posts only
}

// fakeGateway is a registry gateway that answers through its Func fields
// and records every call. A call whose Func is nil fails the test and
// answers ErrUnavailable (it did nothing). Set the fields while no call is
// in flight; recording is safe for concurrent use.
type fakeGateway struct {
	PostFunc   func(ctx context.Context, p registry.Payment) error
	AnnulFunc  func(ctx context.Context, paymentID string) error
	LookupFunc func(ctx context.Context, paymentID string) (found, annulled bool, err error)
	// QuittanceFunc nil: the registry holds no payment of the UIN.
	QuittanceFunc func(ctx context.Context, uin string) (registry.Quittance, error)

	t    testing.TB
	name string

	mu    sync.Mutex
	calls []registryCall
}

func newFakeGateway(t testing.TB, name string) *fakeGateway { return &fakeGateway{t: t, name: name} }

func (g *fakeGateway) Name() string { return g.name }

func (g *fakeGateway) record(c registryCall, set bool) error {
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	if set {
		return nil
	}
	g.t.Errorf("fake registry %s: unexpected %s %s", g.name, c.Op, c.PaymentID)
	return fmt.Errorf("%w: unexpected %s", registry.ErrUnavailable, c.Op)
}

func (g *fakeGateway) Post(ctx context.Context, p registry.Payment) error {
	fn := g.PostFunc
	if err := g.record(registryCall{Op: "post", PaymentID: p.PaymentID, Payment: p}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, p)
}

func (g *fakeGateway) Annul(ctx context.Context, paymentID string) error {
	fn := g.AnnulFunc
	if err := g.record(registryCall{Op: "annul", PaymentID: paymentID}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, paymentID)
}

func (g *fakeGateway) Lookup(ctx context.Context, paymentID string) (bool, bool, error) {
	fn := g.LookupFunc
	if err := g.record(registryCall{Op: "lookup", PaymentID: paymentID}, fn != nil); err != nil {
		return false, false, err
	}
	return fn(ctx, paymentID)
}

// callsOf returns the calls of op, in order.
func (g *fakeGateway) callsOf(op string) []registryCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []registryCall
	for _, c := range g.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// posts answers every post with err.
func posts(err error) func(context.Context, registry.Payment) error {
	return func(context.Context, registry.Payment) error { return err }
}

func (g *fakeGateway) Quittance(ctx context.Context, uin string) (registry.Quittance, error) {
	if g.QuittanceFunc == nil {
		return registry.Quittance{}, nil
	}
	return g.QuittanceFunc(ctx, uin)
}
