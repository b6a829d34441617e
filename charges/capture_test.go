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

	const capture = "capture K:a1:capture " + currentCard + " " + holdRef
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
				reviewReason: "the gateway refused the capture of an authorized hold: failed authorization_expired",
				calls:        []string{capture}, jobs: releaseHold},
		},
		{
			name: "Declined",
			res:  softDecline,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: "the gateway refused the capture", calls: []string{capture}, jobs: releaseHold},
		},
		{
			name: "UnknownOutcome",
			err:  gateway.ErrUnknownOutcome,
			want: outcome{status: charges.Unknown, authorizationRef: holdRef, unknownPhase: charges.PhaseCapture,
				calls: []string{capture}, jobs: reconcile(charges.PhaseCapture)},
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
				reviewReason: "capture gave no verdict after its last attempt", calls: []string{capture}, jobs: releaseHold},
		},
		{
			name:    "VoidRequested",
			fixture: fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true},
			want:    outcome{status: charges.Authorized, authorizationRef: holdRef, jobs: void}, // no capture call
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

func TestVoidWorker(t *testing.T) {
	t.Parallel()

	const void = "void K:a1:void " + currentCard + " " + holdRef
	cancelled := fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true}

	for _, tc := range []stepCase{
		{
			name: "Succeeded",
			res:  gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"},
			want: outcome{status: charges.Voided, authorizationRef: holdRef, failureCode: "subscription_cancelled",
				calls: []string{void}},
		},
		{
			name: "Refused",
			res:  refused,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: "the gateway refused to void the hold", calls: []string{void}, jobs: releaseHold},
		},
		{
			name: "Unavailable",
			err:  gateway.ErrUnavailable,
			want: outcome{status: charges.Authorized, authorizationRef: holdRef, failureCode: "gateway_unavailable",
				wait: &[2]time.Duration{0, retryBase}, calls: []string{void}},
		},
		{
			name: "UnknownOutcome", // a void is repeated with its key, not looked up
			err:  gateway.ErrUnknownOutcome,
			want: outcome{err: true, status: charges.Authorized, authorizationRef: holdRef, calls: []string{void}},
		},
		{
			name: "UnknownOutcomeOnTheLastAttempt",
			err:  gateway.ErrUnknownOutcome,
			opts: &river.InsertOpts{MaxAttempts: 1},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: "void gave no verdict after its last attempt", calls: []string{void}, jobs: releaseHold},
		},
		{
			name:    "NotRequested",
			fixture: fixture{status: charges.Authorized, authorizationRef: holdRef},
			want:    outcome{status: charges.Authorized, authorizationRef: holdRef},
		},
		{
			name:       "StaleAttempt",
			fixture:    fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true, attempt: 2},
			jobAttempt: 1,
			want:       outcome{status: charges.Authorized, attempt: 2, authorizationRef: holdRef},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			f := tc.fixture
			if f.status == "" {
				f = cancelled
			}
			c := b.newCharge(ctx, t, f)
			b.gateway.VoidFunc = tc.call(t, b)
			attempt := c.AttemptCount
			if tc.jobAttempt != 0 {
				attempt = tc.jobAttempt
			}
			w := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.VoidArgs{ChargeID: c.ID, Attempt: attempt})
			b.requireOutcome(ctx, t, c.ID, res, err, tc.want)
		})
	}
}
