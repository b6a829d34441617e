package registrytest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rebill/rebill/charges/registry"
)

// Call is one call a Fake got.
type Call struct {
	Op        string // post, annul or lookup
	PaymentID string
	Payment   registry.Payment // posts only
}

// Fake is a registry gateway for tests that answers through its Func fields
// and records every call. A call whose Func is nil fails the test and
// answers ErrUnavailable (it did nothing). Set the fields while no call is
// in flight; recording is safe for concurrent use.
type Fake struct {
	PostFunc   func(ctx context.Context, p registry.Payment) error
	AnnulFunc  func(ctx context.Context, paymentID string) error
	LookupFunc func(ctx context.Context, paymentID string) (found, annulled bool, err error)
	// QuittanceFunc nil: the registry holds no payment of the UIN.
	QuittanceFunc func(ctx context.Context, uin string) (registry.Quittance, error)

	t    testing.TB
	name string

	mu    sync.Mutex
	calls []Call
}

// NewFake is a Fake named name whose unexpected calls fail t.
func NewFake(t testing.TB, name string) *Fake { return &Fake{t: t, name: name} }

// Name is the gateway's name.
func (g *Fake) Name() string { return g.name }

func (g *Fake) record(c Call, set bool) error {
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	if set {
		return nil
	}
	g.t.Errorf("fake registry %s: unexpected %s %s", g.name, c.Op, c.PaymentID)
	return fmt.Errorf("%w: unexpected %s", registry.ErrUnavailable, c.Op)
}

// Post records the call and answers with PostFunc.
func (g *Fake) Post(ctx context.Context, p registry.Payment) error {
	fn := g.PostFunc
	if err := g.record(Call{Op: "post", PaymentID: p.PaymentID, Payment: p}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, p)
}

// Annul records the call and answers with AnnulFunc.
func (g *Fake) Annul(ctx context.Context, paymentID string) error {
	fn := g.AnnulFunc
	if err := g.record(Call{Op: "annul", PaymentID: paymentID}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, paymentID)
}

// Lookup records the call and answers with LookupFunc.
func (g *Fake) Lookup(ctx context.Context, paymentID string) (bool, bool, error) {
	fn := g.LookupFunc
	if err := g.record(Call{Op: "lookup", PaymentID: paymentID}, fn != nil); err != nil {
		return false, false, err
	}
	return fn(ctx, paymentID)
}

// CallsOf returns the calls of op, in order.
func (g *Fake) CallsOf(op string) []Call {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Call
	for _, c := range g.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// Posts answers every post with err.
func Posts(err error) func(context.Context, registry.Payment) error {
	return func(context.Context, registry.Payment) error { return err }
}

// Annuls answers every annulment with err.
func Annuls(err error) func(context.Context, string) error {
	return func(context.Context, string) error { return err }
}

// LooksUp answers every look-up with found, annulled and err.
func LooksUp(found, annulled bool, err error) func(context.Context, string) (bool, bool, error) {
	return func(context.Context, string) (bool, bool, error) { return found, annulled, err }
}

// Quittance answers with QuittanceFunc; nil: no payment of the UIN.
func (g *Fake) Quittance(ctx context.Context, uin string) (registry.Quittance, error) {
	if g.QuittanceFunc == nil {
		return registry.Quittance{}, nil
	}
	return g.QuittanceFunc(ctx, uin)
}
