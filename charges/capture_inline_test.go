package charges_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// TestCaptureInline: with CaptureInline, the authorize job's run captures
// the hold it placed, and everything proven of a capture job still holds:
// one capture per key through crashes and waits, none once a cancel
// reached the charge, unknown outcomes reconciled.
func TestCaptureInline(t *testing.T) {
	t.Parallel()
	const (
		authorize = "authorize K:a1:authorize " + currentCard
		capture   = "capture K:a1:capture " + holdRef
	)
	inline := func(t *testing.T) (*testBundle, charges.Charge, *rivertest.Worker[charges.AuthorizeArgs, pgx.Tx]) {
		t.Helper()
		b := setup(t)
		b.pipeline.CaptureInline = true
		c := b.newCharge(context.Background(), t, fixture{})
		return b, c, newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	}

	t.Run("OneRunHoldsAndCaptures", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c, w := inline(t)
		b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil)
		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Succeeded, authorizationRef: holdRef,
			calls: []string{authorize, capture}, subCalls: []string{"paid(succeeded)"}})
	})

	t.Run("CrashAfterTheCaptureWasSent", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c, w := inline(t)
		holds := &idempotentGateway{}
		captures := &idempotentGateway{crash: true}
		b.gateway.AuthorizeFunc = holds.call(succeeded)
		b.gateway.CaptureFunc = captures.call(gateway.Result{Status: gateway.StatusSucceeded})

		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.ErrorIs(t, err, &rivertest.PanicError{})
		require.Equal(t, charges.Capturing, b.get(ctx, t, c.ID).Status, "the capture was sent, its outcome not recorded")
		require.Empty(t, b.subs.calls())

		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		const resent = "capture K:a1:capture op_1" // the hold's reference at this gateway
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Succeeded, authorizationRef: "op_1",
			calls: []string{authorize, resent, resent}, subCalls: []string{"paid(succeeded)"}})
		require.Len(t, holds.operations(), 1, "the rerun placed no second hold")
		require.Len(t, captures.operations(), 1, "one capture at the gateway")

		after := b.get(ctx, t, c.ID)
		_, err = w.WorkJob(ctx, t, b.tx, b.rescue(ctx, t, res.Job))
		require.NoError(t, err)
		require.Equal(t, after, b.get(ctx, t, c.ID), "a further rerun changes nothing")
		require.Len(t, b.gateway.Calls(), 3, "and calls nothing")
	})

	t.Run("CaptureWaitsForItsGateway", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c, w := inline(t)
		b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		waiting := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Capturing, waiting.Status)
		b.requireSnoozed(t, res, waiting, 0, retryBase, true)

		b.clock.Set(*waiting.NextAttemptAt)
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil)
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Succeeded, authorizationRef: holdRef,
			calls: []string{authorize, capture, capture}, subCalls: []string{"paid(succeeded)"}})
	})

	t.Run("CancelDuringTheHoldVoidsInsteadOfCapturing", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c, w := inline(t)
		b.gateway.AuthorizeFunc = func(context.Context, gateway.Request) (gateway.Result, error) {
			cancelMeanwhile(ctx, t, b)
			return succeeded, nil
		}
		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Authorized, authorizationRef: holdRef,
			calls: []string{authorize}, jobs: voidJob})
	})

	t.Run("LostCaptureAnswerIsReconciled", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c, w := inline(t)
		b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
		b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
		res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Unknown, unknownPhase: gateway.OpCapture,
			authorizationRef: holdRef, calls: []string{authorize, capture}, jobs: lookupJob(gateway.OpCapture)})
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	})
}
