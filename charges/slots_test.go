package charges_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/velocity"
)

// declineSlots is the declines limit on package velocity, wired as the
// service wires it (app).
type declineSlots struct {
	lim   *velocity.Limiter
	slots *velocity.Slots
}

func (d declineSlots) Reserve(ctx context.Context, customerID string, card charges.Card, holder string, mayHaveSent bool) (charges.SlotAnswer, error) {
	a, err := d.slots.Reserve(ctx, customerID, cardDigest(card), holder, mayHaveSent)
	return answerOf(a), err
}

func (d declineSlots) Wait(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string, job int64) (charges.SlotAnswer, error) {
	a, err := d.slots.Wait(ctx, tx, customerID, cardDigest(card), holder, job)
	return answerOf(a), err
}

func answerOf(a velocity.Answer) charges.SlotAnswer {
	verdict := map[velocity.Verdict]charges.SlotVerdict{velocity.Granted: charges.SlotGranted,
		velocity.InFlight: charges.SlotsInFlight, velocity.Reached: charges.DeclinesReached}[a.Verdict]
	return charges.SlotAnswer{Verdict: verdict, DayLeft: a.WindowLeft}
}

func (d declineSlots) Release(ctx context.Context, customerID string, card charges.Card, holder string, approved bool) error {
	return d.slots.Release(ctx, customerID, cardDigest(card), holder, approved)
}

func (d declineSlots) ReleaseTx(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string, approved bool) error {
	return d.slots.ReleaseTx(ctx, tx, customerID, cardDigest(card), holder, approved)
}

func (d declineSlots) Count(ctx context.Context, tx pgx.Tx, customerID string, card charges.Card, holder string) error {
	return d.slots.Decline(ctx, tx, customerID, cardDigest(card), holder)
}

// cardDigest names a card as the service does, with no key: the tests'
// tokens are no secret.
func cardDigest(c charges.Card) string {
	sum := sha256.Sum256([]byte(c.Gateway + "\x00" + c.Token))
	return hex.EncodeToString(sum[:])
}

// withDeclineLimit sets a declines limit of max a day on b's pipeline.
func withDeclineLimit(b *testBundle, max int) declineSlots {
	lim := &velocity.Limiter{Clock: b.clock, Max: map[velocity.Limit]int{velocity.Declines: max}}
	d := declineSlots{lim: lim, slots: velocity.NewSlots(lim, velocity.Declines, b.pool)}
	b.pipeline.Declines = d
	return d
}

// holder names a charge's attempt as the slot's holder (the pipeline's
// format, spelled out).
func holder(c charges.Charge) string { return c.ID.String() + "/" + strconv.Itoa(c.AttemptCount) }

// reserveFor gives c's attempt a slot, as its authorize step takes one.
func (d declineSlots) reserveFor(t *testing.T, c charges.Charge) {
	t.Helper()
	a, err := d.Reserve(t.Context(), c.CustomerID, charges.Card{}, holder(c), false)
	require.NoError(t, err)
	require.Equal(t, charges.SlotGranted, a.Verdict)
}

// verdictFor is what another charge of the customer would be told.
func (d declineSlots) verdictFor(t *testing.T, h string) charges.SlotVerdict {
	t.Helper()
	a, err := d.Reserve(t.Context(), "cus_1", charges.Card{}, h, false)
	require.NoError(t, err)
	return a.Verdict
}

// counter is cus_1's declines counter: the day's count and the slots held.
func (b *testBundle) counter(t *testing.T) (int, []string) {
	t.Helper()
	var n int
	var slots []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count, slots FROM velocity_counters
		WHERE customer_id = 'cus_1' AND name = 'declines'`).Scan(&n, &slots))
	return n, slots
}

// A first attempt whose look-up never gets a verdict goes to review and
// gives its slot back: the customer's next charge is not held waiting for
// it until midnight. A person's retry then sends attempt 2, which the
// limit does not hold.
func TestSlotOfAnAttemptSentToReviewIsGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := withDeclineLimit(b, 1)
	c := b.newCharge(ctx, t, fixture{status: charges.Unknown, unknownPhase: gateway.OpAuthorize})
	d.reserveFor(t, c)
	require.Equal(t, charges.SlotsInFlight, d.verdictFor(t, "next/1"), "the unknown outcome holds the day's only slot")

	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnknownOutcome)
	w := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})
	_, err := w.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: gateway.OpAuthorize},
		&river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, charges.RequiresReview, b.get(ctx, t, c.ID).Status)
	count, slots := b.counter(t)
	require.Zero(t, count, "no decline was recorded")
	require.Empty(t, slots)

	retried := retry(t, b, b.get(ctx, t, c.ID))
	require.Equal(t, 2, retried.AttemptCount)
	require.Equal(t, charges.SlotGranted, d.verdictFor(t, "next/1"), "the customer's next charge goes on")
}

// retry is a person's retry as usecases.RetryCharge makes it.
func retry(t *testing.T, b *testBundle, c charges.Charge) charges.Charge {
	t.Helper()
	var next charges.Charge
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		if next, err = b.pipeline.Store.RetryFromReview(t.Context(), tx, c, b.gateway.Name(), newCard, b.clock.Now()); err != nil {
			return err
		}
		return b.pipeline.AttemptEnded(t.Context(), tx, c, charges.Scheduled)
	}))
	return next
}

// resolve is a person's resolution as usecases.ResolveCharge makes it.
func resolve(t *testing.T, b *testBundle, c charges.Charge, outcome charges.Status) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		resolved, err := b.pipeline.Store.Resolve(t.Context(), tx, c.ID,
			charges.Resolution{Outcome: outcome, Evidence: "provider record 42", Actor: "support"}, b.clock.Now())
		if err != nil {
			return err
		}
		return b.pipeline.AttemptEnded(t.Context(), tx, resolved, outcome)
	}))
}

// A charge in review still holding its slot (sent there by a path that
// does not settle it, such as the sweep of discarded jobs) has it settled
// by what a person does: a retry or a resolution as succeeded gives it
// back, a resolution as failed turns it into the day's decline, unless
// the limit itself held the attempt back before it was sent.
func TestPersonSettlesTheSlotOfAnAttemptInReview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		reason     string
		code       charges.ReviewCode
		settle     func(t *testing.T, b *testBundle, c charges.Charge)
		declines   int
		nextCharge charges.SlotVerdict
	}{
		{name: "Retry", reason: "authorize gave no verdict after its last attempt",
			settle:   func(t *testing.T, b *testBundle, c charges.Charge) { retry(t, b, c) },
			declines: 0, nextCharge: charges.SlotGranted},
		{name: "ResolvedSucceeded", reason: "authorize gave no verdict after its last attempt",
			settle:   func(t *testing.T, b *testBundle, c charges.Charge) { resolve(t, b, c, charges.Succeeded) },
			declines: 0, nextCharge: charges.SlotGranted},
		{name: "ResolvedFailed", reason: "authorize gave no verdict after its last attempt",
			settle:   func(t *testing.T, b *testBundle, c charges.Charge) { resolve(t, b, c, charges.Failed) },
			declines: 1, nextCharge: charges.DeclinesReached},
		{name: "HeldBackByTheLimitResolvedFailed", reason: charges.ReviewDeclinesLimit.Sentence(), code: charges.ReviewDeclinesLimit,
			settle:   func(t *testing.T, b *testBundle, c charges.Charge) { resolve(t, b, c, charges.Failed) },
			declines: 0, nextCharge: charges.SlotGranted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			d := withDeclineLimit(b, 1)
			c := b.newCharge(ctx, t, fixture{status: charges.RequiresReview, reviewReason: tc.reason, reviewCode: tc.code})
			d.reserveFor(t, c)
			tc.settle(t, b, c)
			count, slots := b.counter(t)
			require.Equal(t, tc.declines, count)
			require.Empty(t, slots)
			require.Equal(t, tc.nextCharge, d.verdictFor(t, "next/1"))
		})
	}
}

// The sweep gives back the slots of attempts no longer in flight (a
// charge in review, an attempt replaced by another, a holder naming no
// charge) and keeps those of authorizes in flight or of unknown outcome.
func TestSweepSettlesSlotsOfEndedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := withDeclineLimit(b, 10)
	charge := func(key string, status charges.Status, attempt int) charges.Charge {
		var created []charges.Charge
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
				PeriodKey: key, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
				Token: currentCard}}, b.clock.Now())
			if err != nil {
				return err
			}
			return dropJobs(ctx, tx, created)
		}))
		_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2, attempt_count = $3 WHERE id = $1`,
			created[0].ID, string(status), attempt)
		require.NoError(t, err)
		return b.get(ctx, t, created[0].ID)
	}
	inFlight := charge("2026-01", charges.Authorizing, 1)
	unknown := charge("2026-02", charges.Unknown, 1)
	review := charge("2026-03", charges.RequiresReview, 1)
	approved := charge("2026-04", charges.Succeeded, 1)
	for _, c := range []charges.Charge{inFlight, unknown, review, approved} {
		d.reserveFor(t, c)
	}
	replaced := charge("2026-05", charges.Authorizing, 2) // attempt 1's slot, attempt 2 running
	_, err := d.Reserve(ctx, "cus_1", charges.Card{}, replaced.ID.String()+"/1", false)
	require.NoError(t, err)
	_, err = d.Reserve(ctx, "cus_1", charges.Card{}, "not-a-charge", false)
	require.NoError(t, err)

	n, err := d.slots.Sweep(ctx, b.pool, func(ctx context.Context, tx pgx.Tx, holders []string) ([]string, error) {
		return charges.EndedAttempts(ctx, tx, holders)
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	count, slots := b.counter(t)
	require.Zero(t, count)
	require.ElementsMatch(t, []string{holder(inFlight), holder(unknown)}, slots)
}

// A step that waits for a slot snoozes its job in its own transaction as
// River would (available with its time ahead, the attempt given back, one
// snooze more); a job no longer running is left alone, as River's own
// snooze, which Work still returns, leaves it.
func TestWaitingStepSnoozesItsJobInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	res, err := client.Insert(ctx, charges.AuthorizeArgs{ChargeID: uuid.New(), Attempt: 1}, nil)
	require.NoError(t, err)
	id := res.Job.ID
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, id)
	require.NoError(t, err)

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return charges.SnoozeJob(ctx, tx, id, time.Minute) }))
	var state string
	var attempt, snoozes, slotWaits int
	var ahead time.Duration
	read := func() {
		require.NoError(t, pool.QueryRow(ctx, `SELECT state, attempt, (metadata ->> 'snoozes')::int, (metadata ->> 'slot_waits')::int,
			extract(epoch FROM scheduled_at - now())::float8 * interval '1 second' FROM river_job WHERE id = $1`, id).
			Scan(&state, &attempt, &snoozes, &slotWaits, &ahead))
	}
	read()
	require.Equal(t, "available", state)
	require.Zero(t, attempt, "a snooze gives its attempt back")
	require.Equal(t, 1, snoozes)
	require.Equal(t, 1, slotWaits, "a wait for a slot, told apart from a wait for the gateway")
	require.InDelta(t, time.Minute.Seconds(), ahead.Seconds(), 10)

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return charges.SnoozeJob(ctx, tx, id, time.Hour) }))
	read()
	require.InDelta(t, time.Minute.Seconds(), ahead.Seconds(), 10, "a job no longer running is left alone")
	require.Equal(t, 1, snoozes)
}

// The pipeline names the card alike when an approval approves it and when
// a decline clears it: once a first attempt on the card is approved, the
// customer's first attempts on it take the approved pool, past the limit;
// once one of them declines, the card is held to the limit again at once.
func TestApprovalAndDeclineOfACardThroughThePipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := withDeclineLimit(b, 2)
	d.slots.ApprovedInFlight = 5
	charge := func(key string) charges.Charge {
		var created []charges.Charge
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
				PeriodKey: key, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
				Token: currentCard}}, b.clock.Now())
			if err != nil {
				return err
			}
			return dropJobs(ctx, tx, created)
		}))
		return created[0]
	}
	card := charges.Card{Gateway: b.gateway.Name(), Token: currentCard}
	verdict := func(h string) charges.SlotVerdict {
		a, err := d.Reserve(ctx, "cus_1", card, h, false)
		require.NoError(t, err)
		return a.Verdict
	}
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})

	approved := charge("2026-01")
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: approved.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	for _, h := range []string{"x/1", "y/1", "z/1"} {
		require.Equal(t, charges.SlotGranted, verdict(h), "the approved card is not held to the limit of 2")
	}

	declining := charge("2026-02")
	require.Equal(t, charges.SlotGranted, verdict(holder(declining)))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(softDecline, nil)
	_, err = w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: declining.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Declined, b.get(ctx, t, declining.ID).Status)
	count, slots := b.counter(t)
	require.Equal(t, 1, count)
	require.ElementsMatch(t, []string{"x/1", "y/1", "z/1"}, slots, "the decline took its slot's place")
	require.Equal(t, charges.SlotsInFlight, verdict("next/1"), "the card declined: held to the limit again")
}
