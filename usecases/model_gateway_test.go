package usecases_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// fakeGateway is a payment provider with a ledger of its own, which the
// invariants judge. It honours idempotency keys like a real provider: a
// key it processed answers with the first result and performs nothing new.
// Its answers are chosen by the test before each step (answers): the
// issuer's verdict on a new authorization and the faults on the way.
//
// A 503 (unavailable) and a timeout before acting leave no trace; a
// timeout after acting records the operation and loses the answer.
type fakeGateway struct {
	// Gateway is what the pipeline calls: it records each call and
	// answers through the provider's methods below.
	*gatewaytest.Gateway

	mu     sync.Mutex
	plan   answers
	seq    int                  // every call, in order
	ops    map[string]*ledgerOp // what the provider processed, by idempotency key
	order  []*ledgerOp
	holds  map[string]*hold   // authorizations, by reference
	sent   map[string]sending // the first time each key was sent
	broken []string           // invariants broken inside a call
	// meanwhile runs once, during the next call, after the request left
	// and before the provider acts: a customer's request that commits
	// while the call is in flight. It gets the call's number.
	meanwhile func(seq int)
	// model answers what the provider cannot know: the subscription's
	// current card and whether (and when) it was cancelled.
	model gatewayModel
}

// gatewayModel is what the fake asks the model about a charge key
// ("<subscription>:<period>") while a call is in flight.
type gatewayModel interface {
	currentToken(chargeKey string) string
	cancelledAt(chargeKey string) (seq int, cancelled bool)
}

// fault is what happens to a call on the way.
type fault int

const (
	faultNone          fault = iota
	faultUnavailable         // 503: the provider did nothing
	faultTimeoutBefore       // no answer; the provider never got the call
	faultTimeoutAfter        // no answer; the provider acted
	faultCrashBefore         // the worker's process dies before the call reaches the provider
	faultCrashAfter          // the worker's process dies after the provider acted
)

var faultNames = []string{"ok", "503", "timeout-before", "timeout-after", "crash-before", "crash-after"}

// simulatedCrash is the panic that stands for a worker process dying in
// the middle of a gateway call: River records the job as failed and runs
// it again (as its rescuer would after a real crash), or discards it
// after its last attempt.
type simulatedCrash struct{}

func (f fault) String() string { return faultNames[f] }

// verdict is the issuer's answer to a new authorization.
type verdict int

const (
	verdictApprove     verdict = iota
	verdictSoftDecline         // insufficient_funds: dunning retries it
	verdictHardDecline         // do_not_honor: no dunning, the same card may be tried again
	verdictStolenCard          // stolen_card: hard, and never the same card again
)

var verdictNames = []string{"approve", "soft-decline", "hard-decline", "stolen-card"}

func (v verdict) String() string { return verdictNames[v] }

// answers are the provider's behaviour for one step: the fault on calls
// that move money, the issuer's verdict on a new authorization, and the
// fault on lookups.
type answers struct {
	money   fault
	verdict verdict
	lookup  fault // faultNone, faultUnavailable, faultTimeoutBefore or faultCrashBefore
}

func (a answers) String() string {
	return fmt.Sprintf("{money: %s, issuer: %s, lookups: %s}", a.money, a.verdict, a.lookup)
}

// ledgerOp is one operation the provider processed.
type ledgerOp struct {
	seq       int
	op        gateway.Op
	key       string
	chargeKey string
	token     string
	authRef   string // capture and void: the hold
	res       gateway.Result
}

// hold is an authorization and what became of it.
type hold struct {
	ref        string
	authKey    string
	chargeKey  string
	capturedBy string // the capture's key
	voidedBy   string
}

// sending is the first call made with a key.
type sending struct {
	seq   int
	token string
}

func newFakeGateway() *fakeGateway {
	g := &fakeGateway{Gateway: gatewaytest.New(nil, "fake")}
	g.AuthorizeFunc, g.CaptureFunc, g.VoidFunc, g.LookupFunc = g.authorize, g.capture, g.void, g.lookup
	g.OperationsFunc = func(context.Context, time.Time) ([]gateway.Result, error) {
		return nil, fmt.Errorf("fake gateway: operations are not listed")
	}
	g.reset()
	return g
}

func (g *fakeGateway) reset() {
	g.Reset()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.plan = answers{}
	g.seq = 0
	g.ops = map[string]*ledgerOp{}
	g.order = nil
	g.holds = map[string]*hold{}
	g.sent = map[string]sending{}
	g.broken = nil
	g.model = nil
	g.meanwhile = nil
}

// inFlight runs the armed meanwhile, if any, without holding the lock
// (the request it stands for runs its own transactions). The caller holds
// the lock.
func (g *fakeGateway) inFlight() {
	fn := g.meanwhile
	if fn == nil {
		return
	}
	g.meanwhile = nil
	seq := g.seq
	g.mu.Unlock()
	defer g.mu.Lock()
	fn(seq)
}

func (g *fakeGateway) setPlan(a answers) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.plan = a
}

func (g *fakeGateway) breakf(format string, args ...any) {
	g.broken = append(g.broken, fmt.Sprintf(format, args...))
}

// send notes a call that carries a request: the token of an authorization
// is the card current when its attempt started (the first call with its
// key), and every later call with a key repeats the first one's token.
func (g *fakeGateway) send(op gateway.Op, req gateway.Request) {
	g.seq++
	first, seen := g.sent[req.IdempotencyKey]
	if !seen {
		g.sent[req.IdempotencyKey] = sending{seq: g.seq, token: req.Token}
		if op == gateway.OpAuthorize && g.model != nil {
			if current := g.model.currentToken(req.ChargeKey); req.Token != current {
				g.breakf("authorize %s sent with token %s; the subscription's card is %s", req.IdempotencyKey, req.Token, current)
			}
		}
		return
	}
	if first.token != req.Token {
		g.breakf("%s %s sent again with token %s; first sent with %s", op, req.IdempotencyKey, req.Token, first.token)
	}
}

// faulted applies the plan's fault before the provider acts.
func faulted(f fault) error {
	switch f {
	case faultUnavailable:
		return gateway.ErrUnavailable
	case faultTimeoutBefore:
		return gateway.ErrUnknownOutcome
	case faultCrashBefore:
		panic(simulatedCrash{})
	}
	return nil
}

func (g *fakeGateway) call(op gateway.Op, req gateway.Request, perform func() gateway.Result) (gateway.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.send(op, req)
	g.inFlight()
	if err := faulted(g.plan.money); err != nil {
		return gateway.Result{}, err
	}
	var res gateway.Result
	if prev, ok := g.ops[req.IdempotencyKey]; ok {
		if prev.op != op {
			g.breakf("key %s used for %s and then %s", req.IdempotencyKey, prev.op, op)
		}
		res = prev.res // same key, same answer, nothing new
	} else {
		res = perform()
		res.Op, res.IdempotencyKey, res.Amount, res.Currency = op, req.IdempotencyKey, req.Amount, req.Currency
		o := &ledgerOp{seq: g.seq, op: op, key: req.IdempotencyKey, chargeKey: req.ChargeKey, token: req.Token,
			authRef: req.AuthorizationID, res: res}
		g.ops[o.key] = o
		g.order = append(g.order, o)
	}
	switch g.plan.money {
	case faultTimeoutAfter:
		return gateway.Result{}, gateway.ErrUnknownOutcome
	case faultCrashAfter:
		panic(simulatedCrash{})
	}
	return res, nil
}

func (g *fakeGateway) authorize(_ context.Context, req gateway.Request) (gateway.Result, error) {
	return g.call(gateway.OpAuthorize, req, func() gateway.Result {
		switch g.plan.verdict {
		case verdictSoftDecline:
			return gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "insufficient_funds"}
		case verdictHardDecline:
			return gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "do_not_honor", Hard: true}
		case verdictStolenCard:
			return gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "stolen_card", Hard: true}
		}
		ref := fmt.Sprintf("auth_%d", len(g.holds)+1)
		g.holds[ref] = &hold{ref: ref, authKey: req.IdempotencyKey, chargeKey: req.ChargeKey}
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: ref}
	})
}

func (g *fakeGateway) capture(_ context.Context, req gateway.Request) (gateway.Result, error) {
	return g.call(gateway.OpCapture, req, func() gateway.Result {
		h := g.holds[req.AuthorizationID]
		switch {
		case h == nil:
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "no_such_authorization"}
		case h.voidedBy != "":
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "authorization_voided"}
		case h.capturedBy != "":
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "already_captured"}
		}
		if g.model != nil {
			if at, cancelled := g.model.cancelledAt(req.ChargeKey); cancelled && g.sent[req.IdempotencyKey].seq > at {
				g.breakf("capture %s first sent after its subscription's cancel committed", req.IdempotencyKey)
			}
		}
		h.capturedBy = req.IdempotencyKey
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_" + strings.TrimPrefix(h.ref, "auth_")}
	})
}

func (g *fakeGateway) void(_ context.Context, req gateway.Request) (gateway.Result, error) {
	return g.call(gateway.OpVoid, req, func() gateway.Result {
		h := g.holds[req.AuthorizationID]
		switch {
		case h == nil:
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "no_such_authorization"}
		case h.capturedBy != "":
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "already_captured"}
		case h.voidedBy != "":
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: "already_voided"}
		}
		h.voidedBy = req.IdempotencyKey
		return gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_" + strings.TrimPrefix(h.ref, "auth_")}
	})
}

// lookup answers from the ledger, unless the plan's lookup fault hits.
func (g *fakeGateway) lookup(_ context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	key := req.Request.IdempotencyKey
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	g.inFlight()
	if err := faulted(g.plan.lookup); err != nil {
		return gateway.Result{}, err
	}
	if o, ok := g.ops[key]; ok {
		return o.res, nil
	}
	return gateway.Result{}, gateway.ErrNotFound
}

// ledgerView is a copy of the provider's records for the invariants.
type ledgerView struct {
	ops    []ledgerOp
	holds  map[string]hold
	broken []string
}

func (g *fakeGateway) view() ledgerView {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := ledgerView{holds: map[string]hold{}, broken: append([]string(nil), g.broken...)}
	for _, o := range g.order {
		v.ops = append(v.ops, *o)
	}
	for ref, h := range g.holds {
		v.holds[ref] = *h
	}
	return v
}

// captures lists the succeeded captures by charge key.
func (v ledgerView) captures() map[string][]ledgerOp {
	out := map[string][]ledgerOp{}
	for _, o := range v.ops {
		if o.op == gateway.OpCapture && o.res.Status == gateway.StatusSucceeded {
			out[o.chargeKey] = append(out[o.chargeKey], o)
		}
	}
	return out
}

// attemptOf is the "<charge key>:a<n>" prefix of a gateway key.
func attemptOf(key string) string {
	if i := strings.LastIndex(key, ":"); i >= 0 {
		return key[:i]
	}
	return key
}

// check judges the ledger on its own: at most one succeeded capture per
// period, every capture of a hold its own attempt placed, and whatever a
// call found wrong while in flight.
func (v ledgerView) check() []string {
	broken := append([]string(nil), v.broken...)
	caps := v.captures()
	keys := make([]string, 0, len(caps))
	for k := range caps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, chargeKey := range keys {
		ops := caps[chargeKey]
		if len(ops) > 1 {
			var ks []string
			for _, o := range ops {
				ks = append(ks, o.key)
			}
			broken = append(broken, fmt.Sprintf("period %s captured %d times: %s", chargeKey, len(ops), strings.Join(ks, ", ")))
		}
		for _, o := range ops {
			h, ok := v.holds[o.authRef]
			if !ok {
				broken = append(broken, fmt.Sprintf("capture %s of unknown hold %q", o.key, o.authRef))
				continue
			}
			if attemptOf(h.authKey) != attemptOf(o.key) {
				broken = append(broken, fmt.Sprintf("capture %s of hold %s placed by %s: another attempt", o.key, h.ref, h.authKey))
			}
		}
	}
	return broken
}
