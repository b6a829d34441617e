package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

func TestReleaseHoldWorker(t *testing.T) {
	t.Parallel()

	const (
		lookupCapture   = "lookup K:a1:capture"
		lookupAuthorize = "lookup K:a1:authorize"
		lookupVoid      = "lookup K:a1:void"
		reason          = "the gateway refused the capture"
		hold            = "auth_9"
	)
	held := gateway.Result{Status: gateway.StatusSucceeded, Reference: hold}
	void := "void K:a1:void " + hold // the attempt's void key, naming the hold found

	for _, tc := range []stepCase{
		{
			name:  "CaptureFound",
			found: map[gateway.Op]gateway.Result{gateway.OpCapture: {Status: gateway.StatusSucceeded, Reference: "cap_1"}},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: reason + " (the gateway shows a succeeded capture cap_1 of attempt 1)",
				calls:        []string{lookupCapture}}, // a note only: the money was taken
		},
		{
			name:  "HoldFound",
			found: map[gateway.Op]gateway.Result{gateway.OpAuthorize: held},
			res:   gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (no capture at the gateway; hold auth_9 was voided)",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid, void}},
		},
		{
			name:  "HoldFoundVoidRefused",
			found: map[gateway.Op]gateway.Result{gateway.OpAuthorize: held},
			res:   refused,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: reason + " (the gateway refused to void hold auth_9: failed )",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid, void}},
		},
		{
			name:  "HoldAlreadyVoided",
			found: map[gateway.Op]gateway.Result{gateway.OpAuthorize: held, gateway.OpVoid: succeeded},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (the gateway shows no hold and no capture)",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid}},
		},
		{
			name:  "AuthorizationDeclined",
			found: map[gateway.Op]gateway.Result{gateway.OpAuthorize: softDecline},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (the gateway shows no hold and no capture)",
				calls:        []string{lookupCapture, lookupAuthorize}},
		},
		{
			name: "NothingFound",
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (the gateway shows no hold and no capture)",
				calls:        []string{lookupCapture, lookupAuthorize}},
		},
		{
			name:      "GatewayUnavailable",
			lookupErr: gateway.ErrUnavailable,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{0, retryBase}, calls: []string{lookupCapture}},
		},
		{
			name:       "GatewayUnavailableLongAndOnTheLastAttempt", // never gives up: a hold must be released
			lookupErr:  gateway.ErrUnavailable,
			opts:       &river.InsertOpts{MaxAttempts: 1},
			createdAgo: 10 * unavailableFor,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{0, retryBase}, calls: []string{lookupCapture}},
		},
		{
			name:        "CircuitOpen",
			circuitOpen: true,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{0, retryBase}},
		},
		{
			// Lookups are safe to repeat: a timeout waits like a 503 and
			// spends no attempt, or River would discard the job and leave
			// the hold.
			name:      "LookupTimedOut",
			lookupErr: gateway.ErrUnknownOutcome,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{0, retryBase}, calls: []string{lookupCapture}},
		},
		{
			name:      "LookupTimedOutOnTheLastAttempt",
			lookupErr: gateway.ErrUnknownOutcome,
			opts:      &river.InsertOpts{MaxAttempts: 1},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{0, retryBase}, calls: []string{lookupCapture}},
		},
		{
			name:    "AlreadyReleased",
			fixture: fixture{holdReleased: true},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				holdReleased: new(time.Minute)}, // as it was
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			f := tc.fixture
			f.status, f.authorizationRef, f.reviewReason = charges.RequiresReview, holdRef, reason
			c := b.newCharge(ctx, t, f)
			b.gateway.LookupFunc = tc.lookups(b, c.AttemptCount)
			b.gateway.VoidFunc = tc.call(t, b)
			w := newWorker(t, b, &charges.ReleaseHoldWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.ReleaseHoldArgs{ChargeID: c.ID, Attempt: c.AttemptCount})
			b.requireOutcome(ctx, t, c.ID, res, err, tc.want)
		})
	}
}
