package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/clock"
)

// Books are what rebill's dev endpoints read and set of a simulated
// provider: its ledger and fault switches, wherever they are kept.
type Books interface {
	Faults(ctx context.Context, gw string) (Faults, error)
	SetFaults(ctx context.Context, gw string, p FaultsPatch) (Faults, error)
	Ledger(ctx context.Context, gw string) ([]LedgerEntry, error)
}

// books are where a simulated provider keeps its operations, call counts
// and fault switches: PostgreSQL ([Store], the default, shared by every
// process on the database and surviving restarts), or this process's
// memory ([StartInMemory]).
type books interface {
	Books
	kindOf(ctx context.Context, gw string, req opRequest) (tokenKind, error)
	countCall(ctx context.Context, gw, key string) (int, error)
	perform(ctx context.Context, gw string, req opRequest, kind tokenKind) (operation, error)
	lookup(ctx context.Context, gw, key string) (operation, error)
	operationsOn(ctx context.Context, gw string, day time.Time) ([]operation, error)
}

// memoryBooks keep the provider's books in this process only, with the
// same rules as [Store]: a benchmark of rebill then measures rebill's
// database work without the simulator's, which on a real provider happens
// on somebody else's machines. Nothing survives the process.
type memoryBooks struct {
	mu      sync.Mutex
	ops     map[string]*memoryOp  // by opKey(gateway, idempotency key)
	refs    map[string]*memoryOp  // by reference (unique across gateways)
	settled map[string]gateway.Op // the succeeded capture or void of each authorization, by reference
	// refunded is the sum of the succeeded refunds of each authorization,
	// by reference.
	refunded map[string]int64
	order    []*memoryOp    // oldest first
	calls    map[string]int // by opKey(gateway, idempotency key)
	// firstSeen is each recovering token's first attempt, by
	// opKey(gateway, tokenHash), as gatewaysim.token_first_seen.
	firstSeen map[string]time.Time
	faults    map[string]Faults
	// clock stamps operations' At, as [Store.OnClock]; ReceivedAt is
	// real time.
	clock clock.Clock
}

// memoryOp is an operation and the gateway that processed it.
type memoryOp struct {
	gw string
	operation
}

func newMemoryBooks(clk clock.Clock) *memoryBooks {
	return &memoryBooks{clock: clk, ops: map[string]*memoryOp{}, refs: map[string]*memoryOp{}, settled: map[string]gateway.Op{}, refunded: map[string]int64{},
		calls: map[string]int{}, firstSeen: map[string]time.Time{}, faults: map[string]Faults{}}
}

func opKey(gw, key string) string { return gw + "\x00" + key }

func (m *memoryBooks) Faults(_ context.Context, gw string) (Faults, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.faults[gw], nil
}

func (m *memoryBooks) SetFaults(_ context.Context, gw string, p FaultsPatch) (Faults, error) {
	if err := p.validate(); err != nil {
		return Faults{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.faults[gw]
	if p.Down != nil {
		f.Down = *p.Down
	}
	if p.LatencyMS != nil {
		f.LatencyMS = *p.LatencyMS
	}
	if p.ErrorRate != nil {
		f.ErrorRate = *p.ErrorRate
	}
	if p.CapturesDown != nil {
		f.CapturesDown = *p.CapturesDown
	}
	if p.RefundsDown != nil {
		f.RefundsDown = *p.RefundsDown
	}
	if p.RefundsLost != nil {
		f.RefundsLost = *p.RefundsLost
	}
	m.faults[gw] = f
	return f, nil
}

func (m *memoryBooks) Ledger(_ context.Context, gw string) ([]LedgerEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var entries []LedgerEntry
	for _, o := range m.order {
		if o.gw == gw {
			entries = append(entries, o.ledgerEntry())
		}
	}
	return entries, nil
}

func (m *memoryBooks) kindOf(_ context.Context, gw string, req opRequest) (tokenKind, error) {
	if req.Token != "" || req.Op == gateway.OpAuthorize {
		return classify(req.Token), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if auth := m.authorization(gw, req.AuthorizationID); auth != nil {
		return auth.Kind, nil
	}
	return kindInvalid, nil
}

func (m *memoryBooks) countCall(_ context.Context, gw, key string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[opKey(gw, key)]++
	return m.calls[opKey(gw, key)], nil
}

func (m *memoryBooks) perform(_ context.Context, gw string, req opRequest, kind tokenKind) (operation, error) {
	// Read before the lock: the dev clock is a database read, which must
	// not hold up every other call.
	at := m.clock.Now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.ops[opKey(gw, req.IdempotencyKey)]
	if !ok {
		if req.Op == gateway.OpAuthorize && kind == kindFundsAfter {
			seen := opKey(gw, string(tokenHash(req.Token)))
			first, ok := m.firstSeen[seen]
			if !ok {
				first = at
				m.firstSeen[seen] = at
			}
			kind = recoveredKind(req.Token, first, at)
		}
		o = &memoryOp{gw: gw, operation: verdict(req, kind, m.authorization(gw, req.AuthorizationID), m.settled[req.AuthorizationID],
			m.refunded[req.AuthorizationID])}
		o.Reference = gw + "_op_" + uuid.NewString()
		o.At, o.ReceivedAt = at, clock.Wall{}.Now()
		m.ops[opKey(gw, req.IdempotencyKey)] = o
		m.refs[o.Reference] = o
		m.order = append(m.order, o)
		switch {
		case o.Status != gateway.StatusSucceeded, o.Op == gateway.OpAuthorize:
		case o.Op == gateway.OpRefund:
			m.refunded[o.AuthorizationID] += o.Amount
		default:
			m.settled[o.AuthorizationID] = o.Op
		}
	}
	if !o.answers(req) {
		return operation{}, fmt.Errorf("%s %s %q: %w", gw, req.Op, req.IdempotencyKey, errKeyReused)
	}
	return o.operation, nil
}

// authorization is gw's authorization with reference ref, or nil; m.mu is
// held.
func (m *memoryBooks) authorization(gw, ref string) *operation {
	o := m.refs[ref]
	if o == nil || o.Op != gateway.OpAuthorize || o.gw != gw {
		return nil
	}
	return &o.operation
}

func (m *memoryBooks) lookup(_ context.Context, gw, key string) (operation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.ops[opKey(gw, key)]; ok {
		return o.operation, nil
	}
	return operation{}, gateway.ErrNotFound
}

func (m *memoryBooks) operationsOn(_ context.Context, gw string, day time.Time) ([]operation, error) {
	from := day.UTC().Truncate(24 * time.Hour)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []operation
	for _, o := range m.order {
		if o.gw == gw && !o.At.Before(from) && o.At.Before(from.Add(24*time.Hour)) {
			out = append(out, o.operation)
		}
	}
	return out, nil
}
