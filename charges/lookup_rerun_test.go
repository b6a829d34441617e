package charges_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// TestReconcileRerun runs a reconcile job again after its resend of a lost
// call got no verdict (the gateway was unavailable, the answer was lost,
// the process died): the charge is then in flight again (authorizing or
// capturing) with its unknown phase still set, and the rerun must finish
// what the first run began, looking the call up and resending it with the
// same key; a charge left in flight without a job would never settle.
func TestReconcileRerun(t *testing.T) {
	t.Parallel()

	// first is the gateway's answer to the first resend; then it answers
	// as an idempotent gateway.
	type firstAnswer int
	const (
		unavailable firstAnswer = iota // did nothing, said so
		lost                           // performed it, the answer was lost
		crash                          // performed it, then the process died
	)

	for _, tc := range []struct {
		name      string
		phase     gateway.Op
		first     firstAnswer
		firstRun  river.EventKind
		wantCalls []string
	}{
		{"AuthorizeResendUnavailable", gateway.OpAuthorize, unavailable, river.EventKindJobSnoozed,
			[]string{"lookup K:a1:authorize", "authorize K:a1:authorize " + currentCard,
				"lookup K:a1:authorize", "authorize K:a1:authorize " + currentCard}},
		{"AuthorizeResendLost", gateway.OpAuthorize, lost, river.EventKindJobFailed,
			[]string{"lookup K:a1:authorize", "authorize K:a1:authorize " + currentCard, "lookup K:a1:authorize"}},
		{"AuthorizeResendCrashed", gateway.OpAuthorize, crash, river.EventKindJobFailed,
			[]string{"lookup K:a1:authorize", "authorize K:a1:authorize " + currentCard, "lookup K:a1:authorize"}},
		{"CaptureResendUnavailable", gateway.OpCapture, unavailable, river.EventKindJobSnoozed,
			[]string{"lookup K:a1:capture", "capture K:a1:capture " + holdRef,
				"lookup K:a1:capture", "capture K:a1:capture " + holdRef}},
		{"CaptureResendLost", gateway.OpCapture, lost, river.EventKindJobFailed,
			[]string{"lookup K:a1:capture", "capture K:a1:capture " + holdRef, "lookup K:a1:capture"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			f := fixture{status: charges.Unknown, unknownPhase: tc.phase}
			if tc.phase == gateway.OpCapture {
				f.authorizationRef = holdRef
			}
			c := b.newCharge(ctx, t, f)
			g := &idempotentGateway{crash: tc.first == crash}
			perform := g.call(succeeded)
			answered := false
			resend := func(ctx context.Context, req gateway.Request) (gateway.Result, error) {
				if answered || tc.first == crash {
					return perform(ctx, req)
				}
				answered = true
				if tc.first == unavailable {
					return gateway.Result{}, gateway.ErrUnavailable
				}
				_, _ = perform(ctx, req)
				return gateway.Result{}, gateway.ErrUnknownOutcome
			}
			b.gateway.LookupFunc = g.lookup
			if tc.phase == gateway.OpCapture {
				b.gateway.CaptureFunc = resend
			} else {
				b.gateway.AuthorizeFunc = resend
			}
			w := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})

			res, err := w.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: tc.phase}, nil)
			if tc.first == unavailable {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			require.Equal(t, tc.firstRun, res.EventKind)
			require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateScheduled,
				rivertype.JobStateRetryable}, res.Job.State, "River runs the reconcile job again")

			_, err = w.WorkJob(ctx, t, b.tx, res.Job)
			require.NoError(t, err)
			b.requireCalls(t, tc.wantCalls...)
			require.Len(t, g.operations(), 1, "one operation at the gateway, under the same key")
			after := b.get(ctx, t, c.ID)
			require.Empty(t, after.UnknownOp)
			if tc.phase == gateway.OpCapture {
				require.Equal(t, charges.Succeeded, after.Status)
				require.Equal(t, []string{"paid(succeeded)"}, b.subs.calls())
				b.requireNextJobs(ctx, t)
				return
			}
			require.Equal(t, charges.Authorized, after.Status)
			require.Equal(t, "op_1", after.AuthorizationRef)
			b.requireNextJobs(ctx, t, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1})
		})
	}
}

func TestReconcileRerunCancelledMeanwhile(t *testing.T) {
	t.Parallel()

	t.Run("AuthorizeNeverSent", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Unknown, unknownPhase: gateway.OpAuthorize})
		b.gateway.LookupFunc = gatewaytest.Found(nil)
		b.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
		w := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})
		res, err := w.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: gateway.OpAuthorize}, nil)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobSnoozed, res.EventKind)

		b.requestVoid(ctx, t)
		b.gateway.AuthorizeFunc = nil // nothing may be sent now
		_, err = w.WorkJob(ctx, t, b.tx, res.Job)
		require.NoError(t, err)
		b.requireCalls(t, "lookup K:a1:authorize", "authorize K:a1:authorize "+currentCard, "lookup K:a1:authorize")
		after := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Voided, after.Status)
		require.Equal(t, "subscription_cancelled", after.FailureCode)
		b.requireNextJobs(ctx, t)
	})

	t.Run("AuthorizeSentAndHeld", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{status: charges.Unknown, unknownPhase: gateway.OpAuthorize})
		g := &idempotentGateway{}
		perform := g.call(succeeded)
		b.gateway.LookupFunc = g.lookup
		b.gateway.AuthorizeFunc = func(ctx context.Context, req gateway.Request) (gateway.Result, error) {
			_, _ = perform(ctx, req)
			return gateway.Result{}, gateway.ErrUnknownOutcome
		}
		w := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})
		res, err := w.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: gateway.OpAuthorize}, nil)
		require.Error(t, err)

		b.requestVoid(ctx, t)
		b.gateway.AuthorizeFunc = nil
		_, err = w.WorkJob(ctx, t, b.tx, res.Job)
		require.NoError(t, err)
		b.requireCalls(t, "lookup K:a1:authorize", "authorize K:a1:authorize "+currentCard, "lookup K:a1:authorize")
		after := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Authorized, after.Status, "the hold exists: it is voided, not captured")
		b.requireNextJobs(ctx, t, charges.VoidArgs{ChargeID: c.ID, Attempt: 1})
	})
}
