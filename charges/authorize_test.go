package charges_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

// stepCase is one run of a step: the charge's state before it, the
// subscription as Lock reports it, what happens at the gateway (answers,
// and events that commit while the call is in flight), and the outcome.
type stepCase struct {
	name    string
	fixture fixture
	sub     func(*charges.Subscription) // changes what Lock returns
	// The gateway's answers for the step's call; lookups answer from found
	// (by phase of the charge's attempt), not found otherwise.
	res       gateway.Result
	err       error
	found     map[charges.Phase]gateway.Result
	lookupErr error
	// meanwhile runs inside the gateway call, before it answers: a
	// subscription event that commits while the call is in flight.
	meanwhile   func(ctx context.Context, t *testing.T, b *testBundle)
	circuitOpen bool              // the gateway's breaker is open before the step
	jobAttempt  int               // the job's attempt, when not the charge's
	jobPhase    charges.Phase     // a reconcile job's phase, when not the charge's
	opts        *river.InsertOpts // e.g. MaxAttempts: 1, the job's last attempt
	createdAgo  time.Duration     // the job was created this long before it runs
	want        outcome
}

// lookups answers lookups of the charge's attempt from tc.found and
// tc.lookupErr.
func (tc stepCase) lookups(b *testBundle, attempt int) func(context.Context, string) (gateway.Result, error) {
	if tc.lookupErr != nil {
		return func(context.Context, string) (gateway.Result, error) { return gateway.Result{}, tc.lookupErr }
	}
	ops := map[string]gateway.Result{}
	for phase, res := range tc.found {
		ops[b.key(attempt, phase)] = res
	}
	return ledger(ops)
}

// call is the gateway answer of tc's call, running tc.meanwhile first
// (River works a rivertest job on the test's goroutine).
func (tc stepCase) call(t *testing.T, b *testBundle) func(context.Context, gateway.Request) (gateway.Result, error) {
	return func(ctx context.Context, _ gateway.Request) (gateway.Result, error) {
		if tc.meanwhile != nil {
			tc.meanwhile(ctx, t, b)
		}
		return tc.res, tc.err
	}
}

// runStep prepares tc, works args through w and returns what River
// reported.
func runStep[T river.JobArgs](ctx context.Context, t *testing.T, b *testBundle, tc stepCase, w *rivertest.Worker[T, pgx.Tx],
	args T) (*rivertest.WorkResult, error) {
	t.Helper()
	if tc.sub != nil {
		b.subs.update(tc.sub)
	}
	if tc.circuitOpen {
		b.tripCircuit(ctx, t)
	}
	if tc.createdAgo > 0 {
		job := b.insertJob(ctx, t, args, tc.opts)
		b.clock.Advance(tc.createdAgo)
		return w.WorkJob(ctx, t, b.tx, job)
	}
	return w.Work(ctx, t, b.tx, args, tc.opts)
}

func capture(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.CaptureArgs{ChargeID: id, Attempt: 1}}
}

func void(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.VoidArgs{ChargeID: id, Attempt: 1}}
}

func releaseHold(id uuid.UUID) []river.JobArgs {
	return []river.JobArgs{charges.ReleaseHoldArgs{ChargeID: id, Attempt: 1}}
}

func reconcile(phase charges.Phase) func(uuid.UUID) []river.JobArgs {
	return func(id uuid.UUID) []river.JobArgs {
		return []river.JobArgs{charges.ReconcileArgs{ChargeID: id, Attempt: 1, Phase: phase}}
	}
}

// Events that commit while a call is in flight.
var (
	cancelMeanwhile = func(ctx context.Context, t *testing.T, b *testBundle) { b.requestVoid(ctx, t) }
	cardMeanwhile   = func(ctx context.Context, t *testing.T, b *testBundle) { b.changeCard(ctx, t, newCard) }
)

func TestAuthorizeWorker(t *testing.T) {
	t.Parallel()

	const authorize = "authorize K:a1:authorize " + currentCard

	for _, tc := range []stepCase{
		{
			name: "Succeeded",
			res:  succeeded,
			want: outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: capture},
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
			want: outcome{status: charges.RequiresReview, reviewReason: "the gateway did nothing for longer than 6h0m0s",
				calls: []string{authorize}, jobs: releaseHold},
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
			want: outcome{status: charges.Unknown, unknownPhase: charges.PhaseAuthorize, calls: []string{authorize},
				jobs: reconcile(charges.PhaseAuthorize)},
		},
		{
			name: "UnknownOutcomeOnTheLastAttempt",
			err:  gateway.ErrUnknownOutcome,
			opts: &river.InsertOpts{MaxAttempts: 1}, // still looked up: review is for what a lookup cannot settle
			want: outcome{status: charges.Unknown, unknownPhase: charges.PhaseAuthorize, calls: []string{authorize},
				jobs: reconcile(charges.PhaseAuthorize)},
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
			want: outcome{status: charges.RequiresReview, reviewReason: "authorize gave no verdict after its last attempt",
				calls: []string{authorize}, jobs: releaseHold},
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
			want:      outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: capture},
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
			want:      outcome{status: charges.Authorized, authorizationRef: holdRef, calls: []string{authorize}, jobs: void},
		},
		{
			name: "SubscriptionCancelledThenDeclined",
			sub:  func(s *charges.Subscription) { s.Cancelled = true },
			res:  hardDecline,
			want: outcome{status: charges.Voided, failureCode: "subscription_cancelled", calls: []string{authorize}},
		},
		{
			name: "UnpaidBeforeThePeriodThenDeclined",
			sub:  func(s *charges.Subscription) { s.UnpaidSince = new(periodStart.Add(-time.Hour)) },
			res:  softDecline, // the period began after dunning ended: it is not owed
			want: outcome{status: charges.Voided, failureCode: "subscription_unpaid", calls: []string{authorize}},
		},
		{
			name: "UnpaidDuringThePeriodThenDeclined",
			sub:  func(s *charges.Subscription) { s.UnpaidSince = new(periodStart.Add(time.Hour)) },
			res:  softDecline, // owed, and waits for a new card; the subscription is unpaid already
			want: outcome{status: charges.Failed, failureCode: "insufficient_funds", calls: []string{authorize}},
		},
		{
			name:    "GatewayNotConfigured",
			fixture: fixture{gateway: "gone"},
			want: outcome{status: charges.RequiresReview, reviewReason: `unknown gateway "gone"`,
				jobs: releaseHold},
		},
		{
			name:       "StaleAttempt",
			fixture:    fixture{attempt: 2},
			jobAttempt: 1,
			want:       outcome{status: charges.Scheduled, attempt: 2},
		},
		{
			name:    "RerunCancelledSinceIsLookedUpNotResent",
			fixture: fixture{status: charges.Authorizing, voidRequested: true}, // a crash after the call, then a cancel
			want: outcome{status: charges.Unknown, unknownPhase: charges.PhaseAuthorize,
				jobs: reconcile(charges.PhaseAuthorize)},
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

		b.gateway.AuthorizeFunc = answer(succeeded, nil)
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
	b.gateway.AuthorizeFunc = answer(hardDecline, nil)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	logs := b.logs.String()
	require.Contains(t, logs, `"message":"gateway call"`)
	require.Contains(t, logs, `"decline_code":"stolen_card"`)
	require.Contains(t, logs, c.ID.String())
	require.NotContains(t, logs, currentCard)
}
