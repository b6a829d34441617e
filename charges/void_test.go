package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

func TestVoidWorker(t *testing.T) {
	t.Parallel()

	const void = "void K:a1:void " + holdRef
	cancelled := fixture{status: charges.Authorized, authorizationRef: holdRef, voidRequested: true}

	for _, tc := range []stepCase{
		{
			name: "Succeeded",
			res:  gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"},
			want: outcome{status: charges.Voided, authorizationRef: holdRef, failureCode: "subscription_cancelled",
				calls: []string{void}},
		},
		{
			// Its period began while the subscription was unpaid: not owed,
			// and a past-due subscription owing nothing else is told.
			name: "SucceededNotOwed",
			sub:  func(s *charges.OwnerState) { s.Cancelled = false },
			res:  gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"},
			want: outcome{status: charges.Voided, authorizationRef: holdRef, failureCode: "subscription_unpaid",
				calls: []string{void}, subCalls: []string{"paid(voided)"}},
		},
		{
			name: "Refused",
			res:  refused,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewCode: charges.ReviewVoidRefused, calls: []string{void}, jobs: releaseHoldJob},
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
				reviewCode: charges.ReviewGatewayTimeout, calls: []string{void}, jobs: releaseHoldJob},
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
			b.subs.update(func(s *charges.OwnerState) { s.Cancelled = true }) // what requested the void; tc.sub may say otherwise
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
