package charges_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

func TestCaptureWorker(t *testing.T) {
	t.Parallel()

	const capture = "capture K:a1:capture " + holdRef
	authorized := fixture{status: charges.Authorized, authorizationRef: holdRef}

	for _, tc := range []stepCase{
		{
			name: "Succeeded",
			res:  gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"},
			want: outcome{status: charges.Succeeded, authorizationRef: holdRef, calls: []string{capture},
				subCalls: []string{"paid(succeeded)"}},
		},
		{
			name: "Refused",
			res:  gateway.Result{Status: gateway.StatusFailed, DeclineCode: "authorization_expired"},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewCode: charges.ReviewCaptureRefused,
				calls:      []string{capture}, jobs: releaseHoldJob},
		},
		{
			name: "Declined",
			res:  softDecline,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewCode: charges.ReviewCaptureRefused, calls: []string{capture}, jobs: releaseHoldJob},
		},
		{
			name: "UnknownOutcome",
			err:  gateway.ErrUnknownOutcome,
			want: outcome{status: charges.Unknown, authorizationRef: holdRef, unknownPhase: gateway.OpCapture,
				calls: []string{capture}, jobs: lookupJob(gateway.OpCapture)},
		},
		{
			name: "Unavailable",
			err:  gateway.ErrUnavailable,
			want: outcome{status: charges.Capturing, authorizationRef: holdRef, failureCode: "gateway_unavailable",
				wait: &[2]time.Duration{0, retryBase}, calls: []string{capture}},
		},
		{
			name:        "CircuitOpen",
			circuitOpen: true,
			want: outcome{status: charges.Capturing, authorizationRef: holdRef, failureCode: "gateway_circuit_open",
				wait: &[2]time.Duration{circuitOpenFor, 2 * circuitOpenFor}},
		},
		{
			name: "OtherError",
			err:  errors.New("tls: bad certificate"),
			want: outcome{err: true, status: charges.Capturing, authorizationRef: holdRef, calls: []string{capture}},
		},
		{
			name: "OtherErrorOnTheLastAttempt",
			err:  errors.New("tls: bad certificate"),
			opts: &river.InsertOpts{MaxAttempts: 1},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewCode: charges.ReviewGatewayError, calls: []string{capture}, jobs: releaseHoldJob},
		},
		{
			name:    "VoidRequested",
			fixture: fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true},
			want:    outcome{status: charges.Authorized, authorizationRef: holdRef, jobs: voidJob}, // no capture call
		},
		{
			name:    "AlreadySucceeded",
			fixture: fixture{status: charges.Succeeded, authorizationRef: holdRef},
			want:    outcome{status: charges.Succeeded, authorizationRef: holdRef},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			f := tc.fixture
			if f.status == "" {
				f = authorized
			}
			c := b.newCharge(ctx, t, f)
			b.gateway.CaptureFunc = tc.call(t, b)
			w := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.CaptureArgs{ChargeID: c.ID, Attempt: c.AttemptCount})
			b.requireOutcome(ctx, t, c.ID, res, err, tc.want)
		})
	}
}
