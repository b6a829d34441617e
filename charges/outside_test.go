package charges_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// The rules of fines paid outside rebill: before the first hold of every
// attempt the registry is asked what was paid elsewhere; a fine paid in
// full is never held, one paid in part is held for the rest, and no
// answer holds nothing.

// fakeOutside answers what was paid outside rebill, or err, and counts
// the questions.
type fakeOutside struct {
	mu      sync.Mutex
	paid    int64
	settled bool
	err     error
	asked   int
}

func (f *fakeOutside) PaidOutside(context.Context, charges.Charge) (charges.OutsidePaid, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return charges.OutsidePaid{Amount: f.paid, Settled: f.settled}, f.err
}

func (f *fakeOutside) set(paid int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paid, f.err = paid, err
}

func TestFinePaidOutsideRebill(t *testing.T) {
	t.Parallel()
	deadline := start.Add(48 * time.Hour)
	for _, tc := range []struct {
		name      string
		paid      int64
		settled   bool
		at        time.Time // when the attempt starts
		wantHeld  int64     // 0: nothing is sent to the gateway
		wantOwner []string
	}{
		{name: "nothing paid elsewhere", paid: 0, at: start, wantHeld: 500},
		{name: "the discounted price paid elsewhere", paid: 500, at: start,
			wantOwner: []string{"paid outside 500 (in full: true)"}},
		{name: "more than the price paid elsewhere", paid: 700, at: start,
			wantOwner: []string{"paid outside 700 (in full: true)"}},
		{name: "part of the discounted price paid", paid: 200, at: start, wantHeld: 300,
			wantOwner: []string{"paid outside 200 (in full: false)"}},
		{name: "the discounted price paid after the deadline leaves the rest of the full one", paid: 500,
			at: deadline.Add(time.Hour), wantHeld: 500, wantOwner: []string{"paid outside 500 (in full: false)"}},
		{name: "part paid after the deadline", paid: 300, at: deadline.Add(time.Hour), wantHeld: 700,
			wantOwner: []string{"paid outside 300 (in full: false)"}},
		{name: "the discounted price paid before the deadline, checked after it: the registry judges it settled",
			paid: 500, settled: true, at: deadline.Add(time.Hour), wantOwner: []string{"paid outside 500 (in full: true)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			owner := &fakeEnrollments{}
			b.pipeline.Owners.Enrollments = owner
			postings := &fakePostings{}
			outside := &fakeOutside{paid: tc.paid, settled: tc.settled}
			b.pipeline.Postings, b.pipeline.Outside = postings, outside
			c := newFineCharge(ctx, t, b, deadline)
			b.clock.Set(tc.at)
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)

			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			require.Equal(t, 1, outside.asked, "the registry is asked once")
			require.Equal(t, tc.wantOwner, owner.recorded)
			require.Equal(t, tc.paid, got.PaidOutside)
			if tc.wantHeld == 0 {
				require.Empty(t, b.gateway.Calls(), "a fine paid elsewhere is never held")
				require.Equal(t, charges.Voided, got.Status)
				require.Equal(t, charges.FailurePaidElsewhere, got.FailureCode)
				require.Empty(t, postings.held)
				return
			}
			require.Equal(t, charges.Authorized, got.Status)
			require.Equal(t, tc.wantHeld, got.Amount, "held for the rest of the price that applies")
			calls := b.gateway.Calls()
			require.Len(t, calls, 1)
			require.Equal(t, tc.wantHeld, calls[0].Request.Amount)
			require.Equal(t, []int{1}, postings.held)
		})
	}
}

// A registry that cannot say what was paid elsewhere delays the hold:
// nothing is sent, the charge shows why, and the same job goes on once
// the registry answers.
func TestFineWaitsWhileTheRegistryCannotSayWhatWasPaidElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	outside := &fakeOutside{err: errors.New("registry down")}
	b.pipeline.Postings, b.pipeline.Outside = &fakePostings{}, outside
	c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)

	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.Empty(t, b.gateway.Calls(), "never held blind")
	waiting := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, waiting.Status)
	require.Equal(t, charges.FailureOutsideUnknown, waiting.FailureCode)
	require.NotNil(t, waiting.NextAttemptAt)

	outside.set(100, nil)
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	held := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Authorized, held.Status)
	require.Equal(t, int64(400), held.Amount)
	require.Equal(t, []int64{400}, amounts(b.gateway.Calls()))
}

// A rerun of an attempt already checked is not asked again, and a rerun
// of an attempt already sent is never held back by the check.
func TestAnAttemptIsCheckedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	outside := &fakeOutside{paid: 100}
	b.pipeline.Postings, b.pipeline.Outside = &fakePostings{}, outside
	c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)

	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, _ = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.Equal(t, 1, outside.asked)
	outside.set(500, nil) // paid in full meanwhile: the attempt may already be at the gateway
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	b.gateway.LookupFunc = gatewaytest.Found(nil)
	_, _ = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.Equal(t, 1, outside.asked, "the rerun of a checked attempt is not asked again")
	for _, call := range b.gateway.Calls() {
		require.Equal(t, int64(400), call.Request.Amount, "every call of the attempt is for the amount it was priced at")
	}
}

func amounts(calls []gatewaytest.Call) []int64 {
	out := make([]int64, len(calls))
	for i, c := range calls {
		out[i] = c.Request.Amount
	}
	return out
}

// A hold the poster found outpaid (more paid outside rebill since it was
// priced) is released, not captured, and the next attempt is due at once,
// even with the discount still running; the new attempt asks again.
func TestOutpaidHoldIsReleasedAndTriedAgainAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	outside := &fakeOutside{}
	b.pipeline.Postings, b.pipeline.Outside = &fakePostings{}, outside
	c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.pipeline.Store.HoldOutpaid(ctx, tx, c.ID, 1)
	}))
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid), "the hold is released")
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Declined, got.Status)
	require.Equal(t, charges.FailurePaidOutsideChanged, got.FailureCode)
	require.True(t, got.NextAttemptAt.Equal(b.clock.Now()), "due at once: %s", got.NextAttemptAt)
	require.Empty(t, b.ops(gateway.OpCapture))
}

// A fine's bill source may report more paid than the registry holds; the
// registry is the judge, so the attempt goes on at the price the
// registry's answer leaves, until the discount can no longer be had: from
// the last discounted start on, a disagreement that lasts sends the
// charge to review instead of a hold, and the person who resolves it
// judges (a retry is not sent back for the same report).
func TestFineItsSourceAndTheRegistryDisagreeOn(t *testing.T) {
	t.Parallel()
	deadline := start.Add(48 * time.Hour)
	last := deadline.Add(-charges.PostingDiscountMargin)
	for _, tc := range []struct {
		name       string
		registry   int64
		at         time.Time
		wantHeld   int64 // 0: review, nothing sent
		wantReason string
	}{
		{name: "before the last discounted start: held at the discount", registry: 0, at: last.Add(-time.Second), wantHeld: 500},
		{name: "at the last discounted start: review", registry: 0, at: last,
			wantReason: "the bill source reports 300, the registry holds 0"},
		{name: "after the deadline: review", registry: 100, at: deadline.Add(time.Hour),
			wantReason: "the bill source reports 300, the registry holds 100"},
		{name: "the registry agrees after the deadline: held for the rest of the full price", registry: 300,
			at: deadline.Add(time.Hour), wantHeld: 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.pipeline.Owners.Enrollments = &fakeEnrollments{}
			outside := &fakeOutside{paid: tc.registry}
			b.pipeline.Postings, b.pipeline.Outside = &fakePostings{}, outside
			c := newFineCharge(ctx, t, b, deadline)
			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return b.pipeline.Store.SourceReported(ctx, tx, c.ID, 300, start)
			}))
			b.clock.Set(tc.at)
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)

			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			require.Equal(t, 1, outside.asked)
			got := b.get(ctx, t, c.ID)
			require.Equal(t, tc.registry, got.PaidOutside, "the registry's answer is what counts")
			if tc.wantHeld != 0 {
				require.Equal(t, charges.Authorized, got.Status)
				require.Equal(t, []int64{tc.wantHeld}, amounts(b.gateway.Calls()))
				return
			}
			require.Empty(t, b.gateway.Calls(), "nothing held while they disagree")
			require.Equal(t, charges.RequiresReview, got.Status)
			require.Contains(t, got.ReviewReason, tc.wantReason)
			require.Zero(t, got.SourcePaid, "the report is handed over with the charge")
		})
	}
}

// A bill source's report is not taken for a charge that settled, and the
// same report twice changes nothing.
func TestSourceReportedLeavesSettledChargesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))
	report := func() error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return b.pipeline.Store.SourceReported(ctx, tx, c.ID, 300, start)
		})
	}
	require.NoError(t, report())
	require.Equal(t, int64(300), b.get(ctx, t, c.ID).SourcePaid)
	require.ErrorIs(t, report(), charges.ErrStale, "the same figure again")

	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2, source_paid = 0 WHERE id = $1`, c.ID, string(charges.Voided))
	require.NoError(t, err)
	require.ErrorIs(t, report(), charges.ErrStale)
	require.Zero(t, b.get(ctx, t, c.ID).SourcePaid)
}
