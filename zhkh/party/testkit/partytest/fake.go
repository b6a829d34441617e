package partytest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rebill/rebill/zhkh/party"
)

// Call is one call a Fake got.
type Call struct {
	Op       string // report, cancel or lookup
	ReportID string
	Payment  party.Payment // reports only
}

// Fake is a party for tests that answers through its Func fields and
// records every call. A call whose Func is nil fails the test and answers
// ErrUnavailable (it did nothing). Set the fields while no call is in
// flight; recording is safe for concurrent use.
type Fake struct {
	ReportFunc func(ctx context.Context, p party.Payment) error
	CancelFunc func(ctx context.Context, reportID string) error
	LookupFunc func(ctx context.Context, reportID string) (party.Status, string, error)

	t    testing.TB
	name string

	mu    sync.Mutex
	calls []Call
}

// NewFake is a Fake named name whose unexpected calls fail t.
func NewFake(t testing.TB, name string) *Fake { return &Fake{t: t, name: name} }

// Name is the party's name.
func (f *Fake) Name() string { return f.name }

func (f *Fake) record(c Call, set bool) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if set {
		return nil
	}
	f.t.Errorf("fake party %s: unexpected %s %s", f.name, c.Op, c.ReportID)
	return fmt.Errorf("%w: unexpected %s", party.ErrUnavailable, c.Op)
}

// Report records the call and answers with ReportFunc.
func (f *Fake) Report(ctx context.Context, p party.Payment) error {
	fn := f.ReportFunc
	if err := f.record(Call{Op: "report", ReportID: p.ReportID, Payment: p}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, p)
}

// Cancel records the call and answers with CancelFunc.
func (f *Fake) Cancel(ctx context.Context, reportID string) error {
	fn := f.CancelFunc
	if err := f.record(Call{Op: "cancel", ReportID: reportID}, fn != nil); err != nil {
		return err
	}
	return fn(ctx, reportID)
}

// Lookup records the call and answers with LookupFunc.
func (f *Fake) Lookup(ctx context.Context, reportID string) (party.Status, string, error) {
	fn := f.LookupFunc
	if err := f.record(Call{Op: "lookup", ReportID: reportID}, fn != nil); err != nil {
		return "", "", err
	}
	return fn(ctx, reportID)
}

// Calls returns every call, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// CallsOf returns the calls of op, in order.
func (f *Fake) CallsOf(op string) []Call {
	var out []Call
	for _, c := range f.Calls() {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// Reports answers every report with err.
func Reports(err error) func(context.Context, party.Payment) error {
	return func(context.Context, party.Payment) error { return err }
}

// Cancels answers every annulment with err.
func Cancels(err error) func(context.Context, string) error {
	return func(context.Context, string) error { return err }
}

// LooksUp answers every look-up with status, reason and err.
func LooksUp(status party.Status, reason string, err error) func(context.Context, string) (party.Status, string, error) {
	return func(context.Context, string) (party.Status, string, error) { return status, reason, err }
}
