package charges_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// idempotentGateway performs each idempotency key once, as a provider
// does: a call with a key it already holds returns the first result and
// performs nothing. crash makes the process die (a panic, which River
// records as a failed run) right after the gateway performed the call and
// before any outcome was committed.
type idempotentGateway struct {
	mu        sync.Mutex
	performed map[string]gateway.Result
	crash     bool
}

func (g *idempotentGateway) call(res gateway.Result) func(context.Context, gateway.Request) (gateway.Result, error) {
	return func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		g.mu.Lock()
		first, ok := g.performed[req.IdempotencyKey]
		if !ok {
			if g.performed == nil {
				g.performed = map[string]gateway.Result{}
			}
			first = res
			first.Reference = fmt.Sprintf("op_%d", len(g.performed)+1)
			g.performed[req.IdempotencyKey] = first
		}
		crash := g.crash
		g.crash = false
		g.mu.Unlock()
		if crash {
			panic("crash between the gateway call and the commit")
		}
		return first, nil
	}
}

// lookup finds what the gateway performed.
func (g *idempotentGateway) lookup(_ context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if res, ok := g.performed[req.Request.IdempotencyKey]; ok {
		return res, nil
	}
	return gateway.Result{}, gateway.ErrNotFound
}

func (g *idempotentGateway) operations() map[string]gateway.Result {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]gateway.Result{}
	for k, v := range g.performed {
		out[k] = v
	}
	return out
}

// TestStepRerun runs a step again as River does after a crash: once after
// the gateway call but before the outcome was committed (the rerun repeats
// the call with the same key, so the gateway performs nothing new), and
// once after the commit but before River recorded the job done (the rerun
// changes nothing and calls nothing).
func TestStepRerun(t *testing.T) {
	t.Parallel()

	t.Run("Authorize", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{})
		g := &idempotentGateway{crash: true}
		b.gateway.AuthorizeFunc = g.call(succeeded)
		w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})

		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.ErrorIs(t, err, &rivertest.PanicError{})
		require.Equal(t, river.EventKindJobFailed, res.EventKind)
		require.Equal(t, charges.Authorizing, b.get(ctx, t, c.ID).Status, "the call was sent, its outcome not recorded")
		b.requireNextJobs(ctx, t)

		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
		key := b.key(1, gateway.OpAuthorize)
		b.requireCalls(t, "authorize K:a1:authorize "+currentCard, "authorize K:a1:authorize "+currentCard)
		require.Len(t, g.operations(), 1, "one operation at the gateway")
		after := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Authorized, after.Status)
		require.Equal(t, g.operations()[key].Reference, after.AuthorizationRef)
		b.requireNextJobs(ctx, t, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1})

		_, err = w.WorkJob(ctx, t, b.tx, b.rescue(ctx, t, res.Job))
		require.NoError(t, err)
		require.Equal(t, after, b.get(ctx, t, c.ID), "the second rerun changes nothing")
		require.Len(t, b.gateway.Calls(), 2, "and calls nothing")
		b.requireNextJobs(ctx, t, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1})
	})

	t.Run("Capture", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
		g := &idempotentGateway{crash: true}
		b.gateway.CaptureFunc = g.call(succeeded)
		w := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})

		res, err := w.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.ErrorIs(t, err, &rivertest.PanicError{})
		require.Equal(t, charges.Capturing, b.get(ctx, t, c.ID).Status)
		require.Empty(t, b.subs.calls())

		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		require.NoError(t, err)
		capture := "capture K:a1:capture " + holdRef
		b.requireCalls(t, capture, capture)
		require.Len(t, g.operations(), 1, "one capture at the gateway")
		after := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Succeeded, after.Status)
		require.Equal(t, []string{"paid(succeeded)"}, b.subs.calls())

		_, err = w.WorkJob(ctx, t, b.tx, b.rescue(ctx, t, res.Job))
		require.NoError(t, err)
		require.Equal(t, after, b.get(ctx, t, c.ID), "the second rerun changes nothing")
		require.Len(t, b.gateway.Calls(), 2, "and calls nothing")
		require.Equal(t, []string{"paid(succeeded)"}, b.subs.calls(), "the subscription is told once")
		b.requireNextJobs(ctx, t)
	})

	t.Run("Void", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true})
		g := &idempotentGateway{crash: true}
		b.gateway.VoidFunc = g.call(succeeded)
		w := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})

		res, err := w.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.ErrorIs(t, err, &rivertest.PanicError{})
		require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)

		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		require.NoError(t, err)
		void := "void K:a1:void " + holdRef
		b.requireCalls(t, void, void)
		require.Len(t, g.operations(), 1)
		after := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Voided, after.Status)

		_, err = w.WorkJob(ctx, t, b.tx, b.rescue(ctx, t, res.Job))
		require.NoError(t, err)
		require.Equal(t, after, b.get(ctx, t, c.ID))
		require.Len(t, b.gateway.Calls(), 2)
	})
}

// TestGatewayBackAfterAWait: a step that waited for its gateway runs again
// with the same key, and its answer clears what the wait showed.
func TestGatewayBackAfterAWait(t *testing.T) {
	t.Parallel()

	t.Run("Authorize", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{})
		b.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
		w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		waiting := b.get(ctx, t, c.ID)
		b.requireSnoozed(t, res, waiting, 0, retryBase, true)

		b.clock.Set(*waiting.NextAttemptAt)
		b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{
			status: charges.Authorized, authorizationRef: holdRef,
			calls: slices.Repeat([]string{"authorize K:a1:authorize " + currentCard}, 2), jobs: captureJob})
	})

	t.Run("Capture", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
		w := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
		res, err := w.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		b.requireSnoozed(t, res, b.get(ctx, t, c.ID), 0, retryBase, true)

		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil)
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Succeeded, authorizationRef: holdRef,
			calls:    slices.Repeat([]string{"capture K:a1:capture " + holdRef}, 2),
			subCalls: []string{"paid(succeeded)"}})
	})
}
