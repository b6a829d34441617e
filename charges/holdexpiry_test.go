package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

const holdLifetime = 7 * 24 * time.Hour

// withHoldLifetime gives the fake gateway a hold lifetime.
func (b *testBundle) withHoldLifetime() {
	b.pipeline.Gateways = fleet.Configure([]fleet.Configured{{Gateway: b.gateway,
		Settings: fleet.Settings{HoldLifetime: holdLifetime}}}, fleet.DefaultBreaker)
}

// heldLedger is a gateway that keeps what it did: the lookups answer from
// it, and the test counts captures on it.
type heldLedger struct{ ops map[string]gateway.Result }

func (l *heldLedger) answer(op gateway.Op, status gateway.Status, ref string) func(context.Context, gateway.Request) (gateway.Result, error) {
	return func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		res := gateway.Result{Op: op, IdempotencyKey: req.IdempotencyKey, Status: status, Reference: ref}
		l.ops[req.IdempotencyKey] = res
		return res, nil
	}
}

func (l *heldLedger) count(op gateway.Op, status gateway.Status) int {
	n := 0
	for _, r := range l.ops {
		if r.Op == op && r.Status == status {
			n++
		}
	}
	return n
}

// A capture that waited on its gateway past the hold lifetime is never
// sent: the old hold is voided, then a new attempt holds and captures, so
// the gateway shows one capture and never two live holds.
func TestExpiredHoldIsVoidedThenAuthorizedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.withHoldLifetime()
	b.pipeline.UnavailableFor = 2 * holdLifetime // the gateway may be down for the whole lifetime
	ledger := &heldLedger{ops: map[string]gateway.Result{}}
	b.gateway.LookupFunc = func(_ context.Context, req gateway.LookupRequest) (gateway.Result, error) {
		key := req.Request.IdempotencyKey
		if r, ok := ledger.ops[key]; ok {
			return r, nil
		}
		return gateway.Result{}, gateway.ErrNotFound
	}
	c := b.newCharge(ctx, t, fixture{})

	b.gateway.AuthorizeFunc = ledger.answer(gateway.OpAuthorize, gateway.StatusSucceeded, holdRef)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	held := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Authorized, held.Status)
	require.True(t, held.AuthorizedAt.Equal(start), "when the hold was placed")

	// The gateway goes down before the capture: it waits.
	b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	res, err := capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.Equal(t, charges.Capturing, b.get(ctx, t, c.ID).Status)

	// Still within the lifetime (an hour's margin): the capture is tried.
	b.clock.Advance(holdLifetime - 2*time.Hour)
	res, err = capture.WorkJob(ctx, t, b.tx, res.Job)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)

	// Past it, and the gateway is back: no capture is sent.
	b.clock.Advance(2 * time.Hour)
	b.gateway.CaptureFunc = ledger.answer(gateway.OpCapture, gateway.StatusSucceeded, "cap_1")
	b.gateway.VoidFunc = ledger.answer(gateway.OpVoid, gateway.StatusSucceeded, "void_1")
	_, err = capture.WorkJob(ctx, t, b.tx, res.Job)
	require.NoError(t, err)
	again := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, again.Status)
	require.Equal(t, 2, again.AttemptCount, "a new attempt: new gateway keys")
	require.Equal(t, charges.FailureHoldExpired, again.FailureCode)
	require.Nil(t, again.AuthorizedAt)
	require.Empty(t, again.AuthorizationRef)
	var enqueued int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'charge_authorize'
		AND args->>'charge_id' = $1 AND (args->>'attempt')::int = 2`, c.ID.String()).Scan(&enqueued))
	require.Equal(t, 1, enqueued, "the new attempt's authorize is enqueued")

	b.gateway.AuthorizeFunc = ledger.answer(gateway.OpAuthorize, gateway.StatusSucceeded, "auth_2")
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)

	b.requireCalls(t,
		"authorize K:a1:authorize tok_1",
		"capture K:a1:capture auth_1", // unavailable
		"capture K:a1:capture auth_1", // unavailable, still in time
		"lookup K:a1:capture",         // an earlier run may have captured: it did not
		"void K:a1:void auth_1",       // the old hold is released first
		"authorize K:a2:authorize tok_1",
		"capture K:a2:capture auth_2",
	)
	require.Equal(t, 1, ledger.count(gateway.OpCapture, gateway.StatusSucceeded), "one capture")
	require.Equal(t, 2, ledger.count(gateway.OpAuthorize, gateway.StatusSucceeded))
	require.Equal(t, 1, ledger.count(gateway.OpVoid, gateway.StatusSucceeded), "the first hold voided")
}

// The expired hold's capture had in fact been sent by an earlier run (the
// process died before recording it): the lookup finds it, and the charge
// succeeds with no void and no new hold.
func TestExpiredHoldWhoseCaptureHappenedSucceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.withHoldLifetime()
	c := b.newCharge(ctx, t, fixture{status: charges.Capturing, authorizationRef: holdRef})
	_, err := b.pool.Exec(ctx, `UPDATE charges SET authorized_at = $2 WHERE id = $1`, c.ID, start.Add(-holdLifetime))
	require.NoError(t, err)
	b.gateway.LookupFunc = gatewaytest.Found(map[string]gateway.Result{
		b.key(1, gateway.OpCapture): {Op: gateway.OpCapture, Status: gateway.StatusSucceeded, Reference: "cap_1"},
	})
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)
	b.requireCalls(t, "lookup K:a1:capture")
	b.requireNextJobs(ctx, t)
}

// A void the gateway refuses after no capture was found means it no longer
// holds the authorization (lapsed at the gateway): authorized again.
// A capture refused as expired_on_capture (YooKassa) likewise, with no void.
func TestHoldGoneAtTheGatewayIsAuthorizedAgain(t *testing.T) {
	t.Parallel()
	t.Run("void refused", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		b.withHoldLifetime()
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
		_, err := b.pool.Exec(ctx, `UPDATE charges SET authorized_at = $2 WHERE id = $1`, c.ID, start.Add(-holdLifetime))
		require.NoError(t, err)
		b.gateway.LookupFunc = gatewaytest.Found(nil)
		b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusFailed, DeclineCode: "payment_intent_unexpected_state"}, nil)
		capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
		_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Scheduled, got.Status)
		require.Equal(t, 2, got.AttemptCount)
		b.requireCalls(t, "lookup K:a1:capture", "void K:a1:void auth_1")
		b.requireNextJobs(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2})
	})
	t.Run("expired_on_capture", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusFailed, DeclineCode: charges.DeclineExpiredOnCapture}, nil)
		capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
		_, err := capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Scheduled, got.Status)
		require.Equal(t, 2, got.AttemptCount)
		require.Equal(t, charges.FailureHoldExpired, got.FailureCode)
		b.requireCalls(t, "capture K:a1:capture auth_1")
		b.requireNextJobs(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2})
	})
	t.Run("cancelled meanwhile: voided, not authorized again", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
		b.gateway.CaptureFunc = func(ctx context.Context, _ gateway.Request) (gateway.Result, error) {
			b.requestVoid(ctx, t) // the cancel lands while the capture is in flight
			return gateway.Result{Status: gateway.StatusFailed, DeclineCode: charges.DeclineExpiredOnCapture}, nil
		}
		capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
		_, err := capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Voided, got.Status)
		require.Equal(t, "subscription_cancelled", got.FailureCode)
		b.requireNextJobs(ctx, t)
		b.requireCalls(t, "capture K:a1:capture auth_1") // and nothing after it
	})
}
