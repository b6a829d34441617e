package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

func TestReconcileWorker(t *testing.T) {
	t.Parallel()

	run := func(t *testing.T, phase charges.Phase, tc stepCase) {
		t.Helper()
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			f := tc.fixture
			f.status = charges.Unknown
			if f.unknownPhase == "" {
				f.unknownPhase = phase
			}
			if phase == charges.PhaseCapture {
				f.authorizationRef = holdRef
			}
			c := b.newCharge(ctx, t, f)
			b.gateway.LookupFunc = tc.lookups(b, c.AttemptCount)
			if phase == charges.PhaseCapture {
				b.gateway.CaptureFunc = tc.call(t, b)
			} else {
				b.gateway.AuthorizeFunc = tc.call(t, b)
			}
			jobPhase := phase
			if tc.jobPhase != "" {
				jobPhase = tc.jobPhase
			}
			w := newWorker(t, b, &charges.ReconcileWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.ReconcileArgs{ChargeID: c.ID, Attempt: c.AttemptCount, Phase: jobPhase})
			b.requireOutcome(ctx, t, c.ID, res, err, tc.want)
		})
	}

	t.Run("Authorize", func(t *testing.T) {
		t.Parallel()
		const (
			lookup    = "lookup K:a1:authorize"
			authorize = "authorize K:a1:authorize " + currentCard // the same key: a resend, never a replacement
		)
		for _, tc := range []stepCase{
			{
				name:  "FoundSucceeded",
				found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: succeeded},
				want: outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{lookup},
					jobs: capture},
			},
			{
				name:  "FoundSoftDeclined",
				found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: softDecline},
				want: outcome{status: charges.Declined, failureCode: "insufficient_funds", nextAttempt: new(24 * time.Hour),
					calls: []string{lookup}, subCalls: []string{"declined"}},
			},
			{
				name:  "FoundHardDeclined",
				found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: hardDecline},
				want: outcome{status: charges.Failed, failureCode: "stolen_card", calls: []string{lookup},
					subCalls: []string{"failed(failed)"}},
			},
			{
				name:    "FoundSucceededVoidRequested",
				fixture: fixture{voidRequested: true},
				found:   map[charges.Phase]gateway.Result{charges.PhaseAuthorize: succeeded},
				want:    outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{lookup}, jobs: void},
			},
			{
				name: "NotFoundResentSucceeded",
				res:  succeeded,
				want: outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{lookup, authorize},
					jobs: capture},
			},
			{
				name: "NotFoundResentDeclined",
				res:  softDecline,
				want: outcome{status: charges.Declined, failureCode: "insufficient_funds", nextAttempt: new(24 * time.Hour),
					calls: []string{lookup, authorize}, subCalls: []string{"declined"}},
			},
			{
				name:    "NotFoundVoidRequested",
				fixture: fixture{voidRequested: true}, // nothing was held: nothing to release, nothing sent
				want:    outcome{status: charges.Voided, failureCode: "subscription_cancelled", calls: []string{lookup}},
			},
			{
				name:      "LookupUnavailable",
				lookupErr: gateway.ErrUnavailable,
				want: outcome{status: charges.Unknown, unknownPhase: charges.PhaseAuthorize, failureCode: "gateway_unavailable",
					wait: &[2]time.Duration{0, retryBase}, calls: []string{lookup}},
			},
			{
				name:      "LookupTimedOut",
				lookupErr: gateway.ErrUnknownOutcome, // a lookup changes nothing: River retries it
				want: outcome{err: true, status: charges.Unknown, unknownPhase: charges.PhaseAuthorize,
					calls: []string{lookup}},
			},
			{
				name:      "LookupTimedOutOnTheLastAttempt",
				lookupErr: gateway.ErrUnknownOutcome,
				opts:      &river.InsertOpts{MaxAttempts: 1},
				want: outcome{status: charges.RequiresReview, unknownPhase: charges.PhaseAuthorize,
					reviewReason: "authorize gave no verdict after its last attempt", calls: []string{lookup},
					jobs: releaseHold},
			},
			{
				name:     "StalePhase",
				jobPhase: charges.PhaseCapture,
				want:     outcome{status: charges.Unknown, unknownPhase: charges.PhaseAuthorize},
			},
		} {
			run(t, charges.PhaseAuthorize, tc)
		}
	})

	t.Run("Capture", func(t *testing.T) {
		t.Parallel()
		const (
			lookup  = "lookup K:a1:capture"
			capture = "capture K:a1:capture " + currentCard + " " + holdRef
		)
		for _, tc := range []stepCase{
			{
				name:  "FoundSucceeded",
				found: map[charges.Phase]gateway.Result{charges.PhaseCapture: {Status: gateway.StatusSucceeded, Reference: "cap_1"}},
				want: outcome{status: charges.Succeeded, authorizationRef: holdRef, calls: []string{lookup},
					subCalls: []string{"paid(succeeded)"}},
			},
			{
				name:  "FoundRefused",
				found: map[charges.Phase]gateway.Result{charges.PhaseCapture: refused},
				want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, unknownPhase: charges.PhaseCapture,
					reviewReason: "the gateway refused the capture", calls: []string{lookup}, jobs: releaseHold},
			},
			{
				name: "NotFoundResentSucceeded",
				res:  gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"},
				want: outcome{status: charges.Succeeded, authorizationRef: holdRef, calls: []string{lookup, capture},
					subCalls: []string{"paid(succeeded)"}},
			},
			{
				name:    "NotFoundVoidRequested",
				fixture: fixture{voidRequested: true}, // the hold stays: it is voided, not captured
				want: outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{lookup},
					jobs: void},
			},
			{
				name:      "LookupUnavailable",
				lookupErr: gateway.ErrUnavailable,
				want: outcome{status: charges.Unknown, authorizationRef: holdRef, unknownPhase: charges.PhaseCapture,
					failureCode: "gateway_unavailable", wait: &[2]time.Duration{0, retryBase}, calls: []string{lookup}},
			},
			{
				name:      "LookupTimedOut",
				lookupErr: gateway.ErrUnknownOutcome,
				want: outcome{err: true, status: charges.Unknown, authorizationRef: holdRef,
					unknownPhase: charges.PhaseCapture, calls: []string{lookup}},
			},
			{
				name:     "StalePhase",
				jobPhase: charges.PhaseAuthorize,
				want:     outcome{status: charges.Unknown, authorizationRef: holdRef, unknownPhase: charges.PhaseCapture},
			},
		} {
			run(t, charges.PhaseCapture, tc)
		}
	})
}

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
	void := "void K:a1:void " + currentCard + " " + hold // the attempt's void key, naming the hold found

	for _, tc := range []stepCase{
		{
			name:  "CaptureFound",
			found: map[charges.Phase]gateway.Result{charges.PhaseCapture: {Status: gateway.StatusSucceeded, Reference: "cap_1"}},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: reason + " (the gateway shows a succeeded capture cap_1 of attempt 1)",
				calls:        []string{lookupCapture}}, // a note only: the money was taken
		},
		{
			name:  "HoldFound",
			found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: held},
			res:   gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (no capture at the gateway; hold auth_9 was voided)",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid, void}},
		},
		{
			name:  "HoldFoundVoidRefused",
			found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: held},
			res:   refused,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef,
				reviewReason: reason + " (the gateway refused to void hold auth_9: failed )",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid, void}},
		},
		{
			name:  "HoldAlreadyVoided",
			found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: held, charges.PhaseVoid: succeeded},
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, holdReleased: releasedNow,
				reviewReason: reason + " (the gateway shows no hold and no capture)",
				calls:        []string{lookupCapture, lookupAuthorize, lookupVoid}},
		},
		{
			name:  "AuthorizationDeclined",
			found: map[charges.Phase]gateway.Result{charges.PhaseAuthorize: softDecline},
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
			name:      "LookupTimedOut",
			lookupErr: gateway.ErrUnknownOutcome,
			want: outcome{err: true, status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				calls: []string{lookupCapture}},
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
