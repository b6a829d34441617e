// Package gatewaytest is a payment provider for tests: a gateway.Gateway
// that answers through function fields the test sets and records every
// call it gets, so that a test states what the provider does and asserts
// on what rebill sent it.
//
// A call whose function field is nil is a call the test did not expect:
// it fails the test and returns ErrUnexpectedCall, so a fake cannot answer
// something by accident. Set the fields before the gateway is used, or
// between steps while no call is in flight; recording is safe for
// concurrent use.
package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// The operations a Call records besides gateway's own.
const (
	OpLookup     gateway.Op = "lookup"
	OpOperations gateway.Op = "operations"
)

// ErrUnexpectedCall answers a call whose function field is nil.
var ErrUnexpectedCall = errors.New("gatewaytest: unexpected call")

// Call is one call the gateway got.
type Call struct {
	Op gateway.Op
	// Key is the idempotency key sent (for a look-up, the looked-up
	// operation's).
	Key string
	// Request is what was sent; for a look-up, the request looked up.
	Request gateway.Request
	// Lookup is the whole look-up request (look-ups only).
	Lookup gateway.LookupRequest
	// Day is the day listed (operations only).
	Day time.Time
}

// Gateway is a programmable, recording payment provider. Create it with
// New.
type Gateway struct {
	AuthorizeFunc  func(ctx context.Context, req gateway.Request) (gateway.Result, error)
	CaptureFunc    func(ctx context.Context, req gateway.Request) (gateway.Result, error)
	VoidFunc       func(ctx context.Context, req gateway.Request) (gateway.Result, error)
	RefundFunc     func(ctx context.Context, req gateway.Request) (gateway.Result, error)
	LookupFunc     func(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error)
	OperationsFunc func(ctx context.Context, day time.Time) ([]gateway.Result, error)

	tb   testing.TB
	name string

	mu    sync.Mutex
	calls []Call
}

var _ gateway.Gateway = (*Gateway)(nil)

// New returns a gateway named name that answers nothing until its
// function fields are set; an unexpected call fails tb.
func New(tb testing.TB, name string) *Gateway {
	return &Gateway{tb: tb, name: name}
}

// Name is the gateway's configured name.
func (g *Gateway) Name() string { return g.name }

// Calls returns a copy of every call so far, in the order they came.
func (g *Gateway) Calls() []Call {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Call(nil), g.calls...)
}

// CallsOf returns the calls of one operation, in order.
func (g *Gateway) CallsOf(op gateway.Op) []Call {
	var out []Call
	for _, c := range g.Calls() {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// Keys returns the idempotency keys of the calls of op, in order.
func (g *Gateway) Keys(op gateway.Op) []string {
	var out []string
	for _, c := range g.CallsOf(op) {
		out = append(out, c.Key)
	}
	return out
}

// Reset forgets the calls so far.
func (g *Gateway) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = nil
}

// record notes c and returns whether the test set fn.
func (g *Gateway) record(c Call, set bool) error {
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	if set {
		return nil
	}
	if g.tb != nil {
		g.tb.Errorf("gatewaytest %s: unexpected %s %s", g.name, c.Op, c.Key)
	}
	return fmt.Errorf("%w: %s %s", ErrUnexpectedCall, c.Op, c.Key)
}

func (g *Gateway) money(ctx context.Context, op gateway.Op, fn func(context.Context, gateway.Request) (gateway.Result, error),
	req gateway.Request) (gateway.Result, error) {
	if err := g.record(Call{Op: op, Key: req.IdempotencyKey, Request: req}, fn != nil); err != nil {
		return gateway.Result{}, err
	}
	return fn(ctx, req)
}

// Authorize records the call and answers with AuthorizeFunc.
func (g *Gateway) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return g.money(ctx, gateway.OpAuthorize, g.AuthorizeFunc, req)
}

// Capture records the call and answers with CaptureFunc.
func (g *Gateway) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return g.money(ctx, gateway.OpCapture, g.CaptureFunc, req)
}

// Void records the call and answers with VoidFunc.
func (g *Gateway) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return g.money(ctx, gateway.OpVoid, g.VoidFunc, req)
}

// Refund records the call and answers with RefundFunc.
func (g *Gateway) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	return g.money(ctx, gateway.OpRefund, g.RefundFunc, req)
}

// Lookup records the call and answers with LookupFunc.
func (g *Gateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	fn := g.LookupFunc
	if err := g.record(Call{Op: OpLookup, Key: req.Request.IdempotencyKey, Request: req.Request, Lookup: req}, fn != nil); err != nil {
		return gateway.Result{}, err
	}
	return fn(ctx, req)
}

// Operations records the call and answers with OperationsFunc.
func (g *Gateway) Operations(ctx context.Context, day time.Time) ([]gateway.Result, error) {
	fn := g.OperationsFunc
	if err := g.record(Call{Op: OpOperations, Day: day}, fn != nil); err != nil {
		return nil, err
	}
	return fn(ctx, day)
}

// Answer is a call that returns res and err whatever it is sent.
func Answer(res gateway.Result, err error) func(context.Context, gateway.Request) (gateway.Result, error) {
	return func(context.Context, gateway.Request) (gateway.Result, error) { return res, err }
}

// LookupAnswer is a look-up that returns res and err whatever it looks
// for.
func LookupAnswer(res gateway.Result, err error) func(context.Context, gateway.LookupRequest) (gateway.Result, error) {
	return func(context.Context, gateway.LookupRequest) (gateway.Result, error) { return res, err }
}

// Found is a look-up that answers from what the provider processed, by
// idempotency key: a key it does not hold is gateway.ErrNotFound.
func Found(ops map[string]gateway.Result) func(context.Context, gateway.LookupRequest) (gateway.Result, error) {
	return func(_ context.Context, req gateway.LookupRequest) (gateway.Result, error) {
		if res, ok := ops[req.Request.IdempotencyKey]; ok {
			return res, nil
		}
		return gateway.Result{}, gateway.ErrNotFound
	}
}
