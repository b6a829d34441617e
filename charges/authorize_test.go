package charges_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

func TestAuthorizeWorker(t *testing.T) {
	t.Parallel()

	const authorize = "authorize K:a1:authorize " + currentCard

	for _, tc := range []stepCase{
		{
			name: "Succeeded",
			res:  succeeded,
			want: outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: captureJob},
		},
		{
			name: "SoftDecline",
			res:  softDecline,
			want: outcome{status: charges.Declined, failureCode: "insufficient_funds", nextAttempt: new(24 * time.Hour),
				calls: []string{authorize}, subCalls: []string{"declined"}},
		},
		{
			name:    "SoftDeclineOfTheSecondAttempt",
			fixture: fixture{attempt: 2, firstDeclinedAgo: 25 * time.Hour},
			res:     softDecline,
			want: outcome{status: charges.Declined, attempt: 2, failureCode: "insufficient_funds",
				nextAttempt: new(72*time.Hour - 25*time.Hour), // dunning counts from the first decline
				calls:       []string{"authorize K:a2:authorize " + currentCard}, subCalls: []string{"declined"}},
		},
		{
			name:    "SoftDeclineOfTheLastDunningAttempt",
			fixture: fixture{attempt: 3, firstDeclinedAgo: 72 * time.Hour},
			res:     softDecline,
			want: outcome{status: charges.Failed, attempt: 3, failureCode: "insufficient_funds",
				calls: []string{"authorize K:a3:authorize " + currentCard}, subCalls: []string{"failed(failed)"}},
		},
		{
			name: "HardDecline",
			res:  hardDecline,
			want: outcome{status: charges.Failed, failureCode: "stolen_card", calls: []string{authorize},
				subCalls: []string{"failed(failed)"}},
		},
		{
			name: "Refused",
			res:  refused,
			want: outcome{status: charges.Failed, failureCode: "gateway_refused", calls: []string{authorize},
				subCalls: []string{"failed(failed)"}},
		},
		{
			name: "Unavailable",
			err:  gateway.ErrUnavailable,
			want: outcome{status: charges.Authorizing, failureCode: "gateway_unavailable", wait: &[2]time.Duration{0, retryBase},
				calls: []string{authorize}},
		},
		{
			name: "UnavailableOnTheLastAttempt",
			err:  gateway.ErrUnavailable,
			opts: &river.InsertOpts{MaxAttempts: 1}, // snoozes spend no attempt: the last one stays the last
			want: outcome{status: charges.Authorizing, failureCode: "gateway_unavailable", wait: &[2]time.Duration{0, retryBase},
				calls: []string{authorize}},
		},
		{
			name:       "UnavailableForTooLong",
			err:        gateway.ErrUnavailable,
			createdAgo: unavailableFor + time.Second,
			want: outcome{status: charges.RequiresReview, reviewCode: charges.ReviewGatewayUnavailable,
				calls: []string{authorize}, jobs: releaseHoldJob},
		},
		{
			name:        "CircuitOpen",
			circuitOpen: true,
			want: outcome{status: charges.Authorizing, failureCode: "gateway_circuit_open",
				wait: &[2]time.Duration{circuitOpenFor, 2 * circuitOpenFor}}, // nothing reaches the gateway
		},
		{
			name: "UnknownOutcome",
			err:  gateway.ErrUnknownOutcome,
			want: outcome{status: charges.Unknown, unknownPhase: gateway.OpAuthorize, calls: []string{authorize},
				jobs: lookupJob(gateway.OpAuthorize)},
		},
		{
			name: "UnknownOutcomeOnTheLastAttempt",
			err:  gateway.ErrUnknownOutcome,
			opts: &river.InsertOpts{MaxAttempts: 1}, // still looked up: review is for what a lookup cannot settle
			want: outcome{status: charges.Unknown, unknownPhase: gateway.OpAuthorize, calls: []string{authorize},
				jobs: lookupJob(gateway.OpAuthorize)},
		},
		{
			name: "OtherError",
			err:  errors.New("tls: bad certificate"),
			want: outcome{err: true, status: charges.Authorizing, calls: []string{authorize}},
		},
		{
			name: "OtherErrorOnTheLastAttempt",
			err:  errors.New("tls: bad certificate"),
			opts: &river.InsertOpts{MaxAttempts: 1},
			want: outcome{status: charges.RequiresReview, reviewCode: charges.ReviewGatewayError,
				calls: []string{authorize}, jobs: releaseHoldJob},
		},
		{
			name:      "CardChangedInFlightThenSoftDecline",
			res:       softDecline,
			meanwhile: cardMeanwhile,
			want: outcome{status: charges.Scheduled, attempt: 2, failureCode: "insufficient_funds", calls: []string{authorize},
				subCalls: []string{"declined"}, jobs: func(id uuid.UUID) []river.JobArgs {
					return []river.JobArgs{charges.AuthorizeArgs{ChargeID: id, Attempt: 2}} // at once, not on a dunning date
				}},
		},
		{
			name:      "CardChangedInFlightThenHardDecline",
			res:       hardDecline,
			meanwhile: cardMeanwhile, // the hard decline was about the old card
			want: outcome{status: charges.Scheduled, attempt: 2, failureCode: "stolen_card", calls: []string{authorize},
				subCalls: []string{"declined"}, jobs: func(id uuid.UUID) []river.JobArgs {
					return []river.JobArgs{charges.AuthorizeArgs{ChargeID: id, Attempt: 2}}
				}},
		},
		{
			name:      "CardChangedInFlightThenSucceeded",
			res:       succeeded,
			meanwhile: cardMeanwhile, // the hold on the old card is as good
			want:      outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: captureJob},
		},
		{
			name:      "CancelledInFlightThenDeclined",
			res:       softDecline,
			meanwhile: cancelMeanwhile,
			want:      outcome{status: charges.Voided, failureCode: "subscription_cancelled", calls: []string{authorize}},
		},
		{
			name:      "CancelledInFlightThenSucceeded",
			res:       succeeded,
			meanwhile: cancelMeanwhile, // the hold is released, not captured
			want:      outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: voidJob},
		},
		{
			name: "SubscriptionCancelledThenDeclined",
			sub:  func(s *charges.OwnerState) { s.Cancelled = true },
			res:  hardDecline,
			want: outcome{status: charges.Voided, failureCode: "subscription_cancelled", calls: []string{authorize}},
		},
		{
			name: "UnpaidBeforeThePeriodThenDeclined",
			sub:  func(s *charges.OwnerState) { s.UnpaidSince = new(periodStart.Add(-time.Hour)) },
			res:  softDecline, // the period began after dunning ended: it is not owed
			want: outcome{status: charges.Voided, failureCode: "subscription_unpaid", calls: []string{authorize}},
		},
		{
			name: "UnpaidDuringThePeriodThenDeclined",
			sub:  func(s *charges.OwnerState) { s.UnpaidSince = new(periodStart.Add(time.Hour)) },
			res:  softDecline, // owed, and waits for a new card; the subscription is unpaid already
			want: outcome{status: charges.Failed, failureCode: "insufficient_funds", calls: []string{authorize}},
		},
		{
			name:    "GatewayNotConfigured",
			fixture: fixture{gateway: "gone"},
			want: outcome{status: charges.RequiresReview, reviewCode: charges.ReviewGatewayNotConfigured,
				jobs: releaseHoldJob},
		},
		{
			name:       "StaleAttempt",
			fixture:    fixture{attempt: 2},
			jobAttempt: 1,
			want:       outcome{status: charges.Scheduled, attempt: 2},
		},
		{
			// Flagged not owed (its period began while the subscription
			// was unpaid) while in flight, then declined: voided as such,
			// and a past-due subscription owing nothing else is told.
			name: "NotOwedSinceThenDeclined",
			meanwhile: func(ctx context.Context, t *testing.T, b *testBundle) {
				require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					return b.pipeline.Store.NotOwedSince(ctx, tx, b.subscriptionID, periodStart, b.clock.Now())
				}))
			},
			res: softDecline,
			want: outcome{status: charges.Voided, failureCode: "subscription_unpaid", calls: []string{authorize},
				subCalls: []string{"paid(voided)"}},
		},
		{
			name:    "RerunCancelledSinceIsLookedUpNotResent",
			fixture: fixture{status: charges.Authorizing, voidRequested: true}, // a crash after the call, then a cancel
			want: outcome{status: charges.Unknown, unknownPhase: gateway.OpAuthorize,
				jobs: lookupJob(gateway.OpAuthorize)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			c := b.newCharge(ctx, t, tc.fixture)
			b.gateway.AuthorizeFunc = tc.call(t, b)
			attempt := c.AttemptCount
			if tc.jobAttempt != 0 {
				attempt = tc.jobAttempt
			}
			w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: attempt})
			b.requireOutcome(ctx, t, c.ID, res, err, tc.want)
		})
	}
}

func TestAuthorizeCardChangedInFlight(t *testing.T) {
	t.Parallel()

	t.Run("TheNewAttemptSendsTheNewCardUnderANewKey", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t)
		c := b.newCharge(ctx, t, fixture{})
		w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
		b.gateway.AuthorizeFunc = stepCase{res: softDecline, meanwhile: cardMeanwhile}.call(t, b)
		_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
		require.NoError(t, err)
		jobs := b.requireNextJobs(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2})

		b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
		res, err := w.WorkJob(ctx, t, b.tx, jobs[0])
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
		b.requireCalls(t, "authorize K:a1:authorize "+currentCard, "authorize K:a2:authorize "+newCard)
		require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
		b.requireNextJobs(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2},
			charges.CaptureArgs{ChargeID: c.ID, Attempt: 2})
	})
}

func TestGatewayCallsAreLoggedWithoutTheToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{})
	b.gateway.AuthorizeFunc = gatewaytest.Answer(hardDecline, nil)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	logs := b.logs.String()
	require.Contains(t, logs, `"message":"gateway call"`)
	require.Contains(t, logs, `"decline_code":"stolen_card"`)
	require.Contains(t, logs, c.ID.String())
	require.NotContains(t, logs, currentCard)
}
