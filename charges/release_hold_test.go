package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
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
			name:        "CircuitOpen", // waited out before asking again
			circuitOpen: true,
			want: outcome{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: reason,
				wait: &[2]time.Duration{circuitOpenFor, 2 * circuitOpenFor}},
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

// A hold check on a gateway that fails every call (each look-up times
// out) asks it a bounded number of times: its waits double from
// Retry.Base past Retry.Max (here dev mode's 1 s and 5 s) up to half an
// hour, instead of coming back every few seconds for as long as the
// gateway is down. With the circuit open, it waits the circuit out.
func TestReleaseHoldBacksOffAGatewayThatIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Retry = charges.RetryPolicy{Base: time.Second, Max: 5 * time.Second, Now: b.clock.Now}
	c := b.newCharge(ctx, t, fixture{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: "no verdict"})
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnknownOutcome)
	w := newWorker(t, b, &charges.ReleaseHoldWorker{Pipeline: b.pipeline})

	end := b.clock.Now().Add(time.Hour)
	res, err := w.Work(ctx, t, b.tx, charges.ReleaseHoldArgs{ChargeID: c.ID, Attempt: 1}, nil)
	runs := 1
	var last time.Duration
	for {
		require.NoError(t, err)
		b.requireSnoozed(t, res, b.get(ctx, t, c.ID), 0, 30*time.Minute, false)
		last = res.Job.ScheduledAt.Sub(b.clock.Now())
		if res.Job.ScheduledAt.After(end) {
			break
		}
		b.clock.Set(res.Job.ScheduledAt)
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
		runs++
	}
	// The waits' floors (half of 1 s, 2 s, 4 s, ... 30 min) sum to past
	// an hour within 14 runs; the old waits, up to 5 s, took ~1,400.
	require.LessOrEqual(t, runs, 14, "runs within an hour")
	calls := len(b.gateway.Calls())
	require.Positive(t, calls)
	require.LessOrEqual(t, calls, runs, "at most one look-up a run (the first timed out); none while the circuit is open")
	require.GreaterOrEqual(t, last, 15*time.Minute, "the wait grew to a quarter of an hour at least")
	require.Nil(t, b.get(ctx, t, c.ID).HoldReleasedAt)
}

// No wait of the hold check is longer than UnavailableFor, the whole time
// a charge step waits on a gateway that does nothing: once the gateway is
// back, the hold is released within that much, however long it was down.
func TestReleaseHoldWaitsNoLongerThanUnavailableFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Retry = charges.RetryPolicy{Base: time.Second, Max: 5 * time.Second, Now: b.clock.Now}
	b.pipeline.UnavailableFor = 30 * time.Second
	c := b.newCharge(ctx, t, fixture{status: charges.RequiresReview, authorizationRef: holdRef, reviewReason: "no verdict"})
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnknownOutcome)
	w := newWorker(t, b, &charges.ReleaseHoldWorker{Pipeline: b.pipeline})
	res, err := w.Work(ctx, t, b.tx, charges.ReleaseHoldArgs{ChargeID: c.ID, Attempt: 1}, nil)
	for run := 1; run < 20; run++ {
		require.NoError(t, err)
		b.requireSnoozed(t, res, b.get(ctx, t, c.ID), 0, 30*time.Second, false)
		b.clock.Set(res.Job.ScheduledAt)
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
	}
}
