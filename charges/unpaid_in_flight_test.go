package charges_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/platform/fsm"
)

// The charge under test collects the period that begins at periodStart;
// the subscription's dunning ends at that moment (an earlier period's
// charge failed for good), so the period is not owed (decision 7). These
// tests are about an attempt of it that is in flight when the end of
// dunning is processed.

// dunningEndsMeanwhile returns an event that commits while a call is in
// flight: an earlier period's charge failed for good and the subscription
// became unpaid as of periodStart, applied as the pipeline applies it.
func dunningEndsMeanwhile(ctx context.Context, t *testing.T, b *testBundle) func(context.Context, *testing.T, *testBundle) {
	t.Helper()
	earlier := b.period(ctx, t, periodStart.AddDate(0, -1, 0), charges.Scheduled)
	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2 WHERE id = $1`, earlier.ID, string(charges.Failed))
	require.NoError(t, err)
	earlier.Status = charges.Failed
	end := periodStart
	return func(ctx context.Context, t *testing.T, b *testBundle) {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM subscriptions WHERE id = $1 FOR UPDATE`, b.subscriptionID); err != nil {
				return err
			}
			return b.pipeline.Store.Failed(ctx, tx, &answeringOwner{dunningEnded: &end}, earlier, b.clock.Now())
		}))
		b.subs.update(func(s *charges.OwnerState) { s.UnpaidSince = &end })
	}
}

// A hold placed for a not-owed period after its dunning ended is released,
// never captured, with or without the capture inline.
func TestDunningEndedWhileAuthorizingHoldIsVoided(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{false, true} {
		name := "CaptureJob"
		if inline {
			name = "CaptureInline"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.pipeline.CaptureInline = inline
			c := b.newCharge(ctx, t, fixture{})
			tc := stepCase{res: succeeded, meanwhile: dunningEndsMeanwhile(ctx, t, b)}
			b.gateway.AuthorizeFunc = tc.call(t, b)
			w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1})
			b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Authorized, authorizationRef: holdRef,
				calls: []string{"authorize K:a1:authorize " + currentCard}, jobs: voidJob})

			jobs := b.requireNextJobs(ctx, t, charges.VoidArgs{ChargeID: c.ID, Attempt: 1})
			b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded}, nil)
			void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
			_, err = void.WorkJob(ctx, t, b.tx, jobs[0])
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			require.Equal(t, charges.Voided, got.Status)
			require.Equal(t, "subscription_unpaid", got.FailureCode)
			b.requireCalls(t, "authorize K:a1:authorize "+currentCard, "void K:a1:void "+holdRef)
			require.Empty(t, b.subs.calls(), "the unpaid subscription hears nothing")
		})
	}
}

// A decline of that attempt voids the charge (no dunning, not failed), and
// a new card does not try it again.
func TestDunningEndedWhileAuthorizingDeclineVoids(t *testing.T) {
	t.Parallel()
	for _, decline := range []gateway.Result{softDecline, hardDecline} {
		t.Run(decline.DeclineCode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			c := b.newCharge(ctx, t, fixture{})
			tc := stepCase{res: decline, meanwhile: dunningEndsMeanwhile(ctx, t, b)}
			b.gateway.AuthorizeFunc = tc.call(t, b)
			w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			res, err := runStep(ctx, t, b, tc, w, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1})
			b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Voided, failureCode: "subscription_unpaid",
				calls: []string{"authorize K:a1:authorize " + currentCard}})

			b.changeCard(ctx, t, newCard) // retries the earlier period's failed charge, not this one
			got := b.get(ctx, t, c.ID)
			require.Equal(t, charges.Voided, got.Status)
			require.Equal(t, 1, got.AttemptCount, "no new attempt")
			require.Zero(t, b.authorizeJobs(ctx, t, c), "no authorize job")
			b.requireCalls(t, "authorize K:a1:authorize "+currentCard)
		})
	}
}

// A capture already sent when the dunning ends stands: the period is paid
// once.
func TestDunningEndedWhileCapturingCaptureStands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
	tc := stepCase{res: gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, meanwhile: dunningEndsMeanwhile(ctx, t, b)}
	b.gateway.CaptureFunc = tc.call(t, b)
	w := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	res, err := runStep(ctx, t, b, tc, w, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1})
	b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.Succeeded, authorizationRef: holdRef,
		calls: []string{"capture K:a1:capture " + holdRef}, subCalls: []string{"paid(succeeded)"}})
	require.False(t, b.get(ctx, t, c.ID).VoidRequested, "a capture in flight is not flagged")
}

// A capture sent when the dunning ends whose hold turns out expired is not
// followed by a new attempt: the charge is voided.
func TestDunningEndedWhileCapturingExpiredHoldIsNotAuthorizedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: holdRef})
	tc := stepCase{res: gateway.Result{Status: gateway.StatusFailed, DeclineCode: charges.DeclineExpiredOnCapture},
		meanwhile: dunningEndsMeanwhile(ctx, t, b)}
	b.gateway.CaptureFunc = tc.call(t, b)
	w := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, err := runStep(ctx, t, b, tc, w, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1})
	require.NoError(t, err)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Voided, got.Status)
	require.Equal(t, "subscription_unpaid", got.FailureCode)
	b.requireNextJobs(ctx, t)
	b.requireCalls(t, "capture K:a1:capture "+holdRef)
}

// An attempt flagged when the dunning ended that goes to review is not
// tried again: a new card leaves it, and a support retry is refused.
func TestDunningEndedWhileAuthorizingNoNewAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{})
	tc := stepCase{err: errors.New("tls: bad certificate"), opts: &river.InsertOpts{MaxAttempts: 1},
		meanwhile: dunningEndsMeanwhile(ctx, t, b)}
	b.gateway.AuthorizeFunc = tc.call(t, b)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	res, err := runStep(ctx, t, b, tc, w, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1})
	b.requireOutcome(ctx, t, c.ID, res, err, outcome{status: charges.RequiresReview, reviewCode: charges.ReviewGatewayError,
		calls: []string{"authorize K:a1:authorize " + currentCard}, jobs: releaseHoldJob})

	b.changeCard(ctx, t, newCard) // retries the earlier period's failed charge, not this one
	inReview := b.get(ctx, t, c.ID)
	require.Equal(t, charges.RequiresReview, inReview.Status)
	require.Equal(t, 1, inReview.AttemptCount)

	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.RetryFromReview(ctx, tx, inReview, b.gateway.Name(), newCard, b.clock.Now())
		return err
	})
	var refused *fsm.TransitionError
	require.ErrorAs(t, err, &refused)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.RequiresReview, got.Status)
	require.Equal(t, 1, got.AttemptCount, "no new attempt")
	require.Zero(t, b.authorizeJobs(ctx, t, c), "no authorize job")
	b.requireCalls(t, "authorize K:a1:authorize "+currentCard)
}

// authorizeJobs counts c's committed authorize jobs.
func (b *testBundle) authorizeJobs(ctx context.Context, t *testing.T, c charges.Charge) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'charge_id' = $2`,
		charges.AuthorizeArgs{}.Kind(), c.ID.String()).Scan(&n))
	return n
}

// A charge in review when the dunning ends gets no support retry either.
func TestDunningEndedWhileInReviewNoRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{status: charges.RequiresReview, reviewCode: charges.ReviewGatewayError,
		reviewReason: charges.ReviewGatewayError.Sentence()})
	dunningEndsMeanwhile(ctx, t, b)(ctx, t, b)
	inReview := b.get(ctx, t, c.ID)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.RetryFromReview(ctx, tx, inReview, b.gateway.Name(), newCard, b.clock.Now())
		return err
	})
	var refused *fsm.TransitionError
	require.ErrorAs(t, err, &refused)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.RequiresReview, got.Status)
	require.Equal(t, 1, got.AttemptCount, "no new attempt")
	require.Zero(t, b.authorizeJobs(ctx, t, c), "no authorize job")
}
