package charges_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// The rules of fines and the state payment registry: a fine is never
// authorized without a registry, never captured without an accepted
// posting of that attempt and amount, a discounted capture the deadline
// overtook is looked up before anything else, and a hold that can no
// longer be posted in time is released.

const fineUIN = "18810142200817004923"

// fakePostings records the holds handed to the registry; the registry's
// acceptance is written by accept.
type fakePostings struct {
	mu   sync.Mutex
	held []int
}

func (f *fakePostings) Held(_ context.Context, _ pgx.Tx, c charges.Charge) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, c.AttemptCount)
	return nil
}

// newFineCharge is newBillCharge with the fine's UIN: held at 500 until
// deadline and at 1000 after, posted to the registry before its capture;
// its authorize job dropped, the test works the steps itself.
func newFineCharge(ctx context.Context, t *testing.T, b *testBundle, deadline time.Time) charges.Charge {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'fake', $2, 12, 2030, $3, $3)`,
		enrollmentID, currentCard, start)
	require.NoError(t, err)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, _, err = b.pipeline.Store.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: fineUIN, Due: start, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "fake", Token: currentCard, RegistryUIN: fineUIN}, start)
		if err != nil {
			return err
		}
		return dropJobs(ctx, tx, []charges.Charge{c})
	}))
	return c
}

// accept records that the registry accepted the posting of c's attempt at
// amount.
func (b *testBundle) accept(ctx context.Context, t *testing.T, c charges.Charge, attempt int, amount int64) {
	t.Helper()
	b.post(ctx, t, c, attempt, amount, "accepted")
}

// post records that c's attempt was posted at amount, the posting now in
// status (posting: sent, the registry not yet answered).
func (b *testBundle) post(ctx context.Context, t *testing.T, c charges.Charge, attempt int, amount int64, status string) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`, uuid.NewString(), c.ID, attempt, fineUIN, amount, status, b.clock.Now())
	require.NoError(t, err)
}

// settlePostings moves every open posting of c (posting, accepted) to
// status, as the registry's answer or the annulment sweep would.
func (b *testBundle) settlePostings(ctx context.Context, t *testing.T, c charges.Charge, status string) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `UPDATE registry_postings SET status = $2 WHERE charge_id = $1 AND status IN ('posting', 'accepted')`,
		c.ID, status)
	require.NoError(t, err)
}

func (b *testBundle) ops(op gateway.Op) []string { return b.gateway.Keys(op) }

// With no registry configured a fine's attempt never reaches the gateway:
// its job waits, and the charge shows why.
func TestFineIsNotAuthorizedWithoutARegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))

	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Empty(t, b.gateway.Calls(), "nothing is sent to the gateway")
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "the job waits for a registry")
	waiting := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, waiting.Status)
	require.Equal(t, charges.FailureRegistryNotConfigured, waiting.FailureCode)

	// Once a registry is configured the same job places the hold and hands
	// it to the registry.
	postings := &fakePostings{}
	b.pipeline.Postings = postings
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
	require.Equal(t, []int{1}, postings.held)
}

// A fine's capture starts only once the registry accepted the posting of
// that attempt at that amount; otherwise the charge goes to review and its
// hold is released, never captured.
func TestFineIsNotCapturedWithoutAnAcceptedPosting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		accepted int64 // the amount the registry accepted; 0: nothing
	}{{"no posting", 0}, {"posting of another amount", 1000}, {"posting accepted", 500}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.pipeline.Owners.Enrollments = &fakeEnrollments{}
			b.pipeline.Postings = &fakePostings{}
			c := newFineCharge(ctx, t, b, start.Add(48*time.Hour))
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status, "held, waiting for the registry")
			if tc.accepted > 0 {
				b.accept(ctx, t, c, 1, tc.accepted)
			}

			if tc.accepted == 500 {
				b.gateway.CaptureFunc = gatewaytest.Answer(succeeded, nil)
			}
			capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
			_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			if tc.accepted == 500 {
				require.Equal(t, charges.Succeeded, got.Status)
				require.Equal(t, []string{c.Key() + ":a1:capture"}, b.ops(gateway.OpCapture))
				return
			}
			require.Empty(t, b.ops(gateway.OpCapture), "no capture is sent")
			require.Equal(t, charges.RequiresReview, got.Status)
			require.Contains(t, got.ReviewReason, "registry")
			rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.ReleaseHoldArgs{ChargeID: c.ID, Attempt: 1}, nil)
		})
	}
}

// A fine's hold placed and posted at the discounted price, its capture
// waiting on a gateway that answers 503, the deadline passes: the capture
// is looked up by its key before anything else. Captured: the charge
// succeeded at the discounted price. Proven not captured: the hold is
// voided and a new attempt is made at the full price. No answer: review,
// and no new attempt while the money may be live.
func TestDiscountedCaptureOvertakenByTheDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lookup func(key string) (gateway.Result, error)
		want   charges.Status
	}{
		{"captured", func(string) (gateway.Result, error) {
			return gateway.Result{Status: gateway.StatusSucceeded, Reference: "cap_1"}, nil
		}, charges.Succeeded},
		{"not captured", func(string) (gateway.Result, error) { return gateway.Result{}, gateway.ErrNotFound }, charges.Scheduled},
		{"no answer", func(string) (gateway.Result, error) { return gateway.Result{}, gateway.ErrUnprovable }, charges.RequiresReview},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			owner := &fakeEnrollments{}
			b.pipeline.Owners.Enrollments = owner
			b.pipeline.Postings = &fakePostings{}
			deadline := start.Add(2 * time.Hour)
			c := newFineCharge(ctx, t, b, deadline)
			var mu sync.Mutex
			amounts := map[string]int64{}
			b.gateway.AuthorizeFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				amounts[req.IdempotencyKey] = req.Amount
				return succeeded, nil
			}
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			b.accept(ctx, t, c, 1, 500)

			b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
			capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
			res, err := capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			require.Equal(t, charges.Capturing, b.get(ctx, t, c.ID).Status)

			b.clock.Advance(3 * time.Hour) // past the deadline
			b.gateway.CaptureFunc = nil    // a late capture fails the test
			b.gateway.LookupFunc = func(_ context.Context, req gateway.LookupRequest) (gateway.Result, error) {
				key := req.Request.IdempotencyKey
				require.Equal(t, c.Key()+":a1:capture", key)
				return tc.lookup(key)
			}
			b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
			_, err = capture.WorkJob(ctx, t, b.tx, res.Job)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			require.Equal(t, tc.want, got.Status)
			require.Equal(t, []string{c.Key() + ":a1:capture"}, b.ops(gateway.OpCapture), "the capture sent before the deadline only")
			switch tc.want {
			case charges.Succeeded:
				require.EqualValues(t, 500, got.Amount, "paid at the discounted price")
				require.Empty(t, b.ops(gateway.OpVoid))
				require.Equal(t, []string{"paid"}, owner.recorded)
			case charges.Scheduled:
				require.Equal(t, 2, got.AttemptCount)
				require.Equal(t, charges.FailureDiscountEnded, got.FailureCode)
				require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid))
				rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
				res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
				require.NoError(t, err)
				require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "no new hold while the old posting stands accepted")
				require.Len(t, amounts, 1)
				b.settlePostings(ctx, t, c, "annulled") // the sweep annuls it
				_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
				require.NoError(t, err)
				require.Equal(t, map[string]int64{c.Key() + ":a1:authorize": 500, c.Key() + ":a2:authorize": 1000}, amounts)
			case charges.RequiresReview:
				require.Equal(t, 1, got.AttemptCount, "no new attempt")
				require.Empty(t, b.ops(gateway.OpVoid))
				rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.ReleaseHoldArgs{ChargeID: c.ID, Attempt: 1}, nil)
			}
		})
	}
}

// A capture whose outcome was lost (unknown) when the deadline passes is
// looked up, never sent again late: not captured, the hold is voided and
// the next attempt is at the full price.
func TestUnknownDiscountedCaptureAfterTheDeadlineIsNotResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	b.pipeline.Postings = &fakePostings{}
	c := newFineCharge(ctx, t, b, start.Add(2*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	b.accept(ctx, t, c, 1, 500)
	b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Unknown, b.get(ctx, t, c.ID).Status)

	b.clock.Advance(3 * time.Hour)
	b.gateway.CaptureFunc = nil
	b.gateway.LookupFunc = gatewaytest.Found(nil)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	reconcile := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})
	_, err = reconcile.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: gateway.OpCapture}, nil)
	require.NoError(t, err)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, got.Status)
	require.Equal(t, 2, got.AttemptCount)
	require.Equal(t, []string{c.Key() + ":a1:capture"}, b.ops(gateway.OpCapture), "never resent after the deadline")
	require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid))
}

// A fine's hold that the registry has not accepted by an hour before its
// discount ends is released by the void the poster enqueues, and the next
// attempt waits for the deadline so that it is at the full price; one the
// registry accepted is left to its capture.
func TestFineHoldThatCanNoLongerBePostedIsReleased(t *testing.T) {
	t.Parallel()
	for _, accepted := range []bool{false, true} {
		t.Run(map[bool]string{false: "not posted", true: "posted"}[accepted], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.pipeline.Owners.Enrollments = &fakeEnrollments{}
			b.pipeline.Postings = &fakePostings{}
			deadline := start.Add(3 * time.Hour)
			c := newFineCharge(ctx, t, b, deadline)
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			held := b.get(ctx, t, c.ID)
			by, ok := charges.PostBy(b.pipeline.Gateways, held)
			require.True(t, ok)
			require.True(t, by.Equal(deadline.Add(-charges.PostingDiscountMargin)), "post by %s", by)
			if accepted {
				b.accept(ctx, t, c, 1, 500)
			}

			b.clock.Advance(150 * time.Minute) // within the hour before the deadline
			b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
			void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
			_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			if accepted {
				require.Equal(t, charges.Authorized, got.Status, "a posted hold is captured, not voided")
				require.Empty(t, b.ops(gateway.OpVoid))
				return
			}
			require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid))
			require.Equal(t, charges.Declined, got.Status)
			require.Equal(t, charges.FailureDiscountEnded, got.FailureCode)
			require.True(t, got.NextAttemptAt.Equal(deadline), "the next attempt waits for the full price: %s", got.NextAttemptAt)
		})
	}
}

// A fine's hold that lapses at its gateway before the registry accepted
// its posting, while the discount has days left, is placed again at the
// discounted price (failure_code hold_expired), never left to wait for the
// deadline and the full price. The new hold waits until the registry has
// settled the old attempt's posting: while it is still being posted, or
// stands accepted, a second hold could end as a second payment of one
// fine at the registry.
func TestFineHoldLapseKeepsTheDiscount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ open, settled string }{
		{"posting", "failed"},    // the registry never took it
		{"posting", "cancelled"}, // never sent
		{"accepted", "annulled"}, // taken, then annulled
	} {
		t.Run(tc.open+" then "+tc.settled, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.withHoldLifetime()
			b.pipeline.UnavailableFor = 2 * holdLifetime
			b.pipeline.Owners.Enrollments = &fakeEnrollments{}
			b.pipeline.Postings = &fakePostings{}
			deadline := start.Add(holdLifetime + 17*24*time.Hour)
			c := newFineCharge(ctx, t, b, deadline)
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			b.post(ctx, t, c, 1, 500, "posting") // the registry is slow: no capture can follow in time

			b.clock.Advance(holdLifetime - charges.HoldExpiryMargin) // the hold's last moment to be posted
			b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
			void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
			_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			// The registry's answer comes after the void: it took the
			// payment (to be annulled), or has still not answered.
			_, err = b.pool.Exec(ctx, `UPDATE registry_postings SET status = $2 WHERE charge_id = $1`, c.ID, tc.open)
			require.NoError(t, err)
			waiting := b.get(ctx, t, c.ID)
			require.Equal(t, []string{c.Key() + ":a1:void"}, b.ops(gateway.OpVoid))
			require.Equal(t, charges.Declined, waiting.Status)
			require.Equal(t, charges.FailureHoldExpired, waiting.FailureCode)
			require.True(t, waiting.NextAttemptAt.Equal(b.clock.Now()), "tried again at once, not at the deadline: %s", waiting.NextAttemptAt)

			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				retried, err := b.pipeline.Store.DueRetries(ctx, tx, b.clock.Now(), 10)
				require.Len(t, retried, 1)
				return err
			}))
			res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
			require.NoError(t, err)
			held := b.get(ctx, t, c.ID)
			b.requireSnoozed(t, res, held, 0, retryBase, true)
			require.Equal(t, charges.Scheduled, held.Status, "no second hold while the old posting is %s", tc.open)
			require.Equal(t, charges.FailureHoldExpired, held.FailureCode)
			require.Equal(t, []int64{500}, authorizeAmounts(b))

			b.settlePostings(ctx, t, c, tc.settled)
			_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
			require.NoError(t, err)
			held = b.get(ctx, t, c.ID)
			require.Equal(t, charges.Authorized, held.Status)
			require.EqualValues(t, 500, held.Amount, "held again at the discounted price")
			require.Equal(t, []int64{500, 500}, authorizeAmounts(b))

			b.accept(ctx, t, c, 2, 500)
			b.gateway.CaptureFunc = gatewaytest.Answer(succeeded, nil)
			capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
			_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 2}, nil)
			require.NoError(t, err)
			require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)
			var captured []int64
			for _, call := range b.gateway.Calls() {
				if call.Op == gateway.OpCapture {
					require.Equal(t, c.Key()+":a2:capture", call.Key)
					captured = append(captured, call.Request.Amount)
				}
			}
			require.Equal(t, []int64{500}, captured, "one capture, at the discounted price")
		})
	}
}

// A re-hold after a lapse is an attempt like any other: when the charge
// already made the card networks' most attempts in their window, the next
// one waits until the oldest of them leaves it.
func TestFineHoldLapseReHoldKeepsToTheCardNetworkBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.withHoldLifetime()
	b.pipeline.UnavailableFor = 2 * holdLifetime
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	b.pipeline.Postings = &fakePostings{}
	c := newFineCharge(ctx, t, b, start.Add(40*24*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	// The attempts before this one: 14 more within the last 30 days.
	oldest := start.Add(-20 * 24 * time.Hour)
	_, err = b.pool.Exec(ctx, `UPDATE charges SET attempt_times = ARRAY(SELECT $2::timestamptz + n * interval '1 hour'
		FROM generate_series(0, 13) n) || attempt_times WHERE id = $1`, c.ID, oldest)
	require.NoError(t, err)

	b.clock.Advance(holdLifetime - charges.HoldExpiryMargin)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	waiting := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Declined, waiting.Status)
	require.Equal(t, charges.FailureHoldExpired, waiting.FailureCode)
	want := oldest.Add(charges.SameCardWindow)
	require.True(t, waiting.NextAttemptAt.Equal(want), "next attempt at %s, want %s", waiting.NextAttemptAt, want)
}

// Of every posting status, only the final ones that hold no payment
// (failed, cancelled, annulled) let a fine's new attempt place its hold;
// any other, present or added later, keeps it waiting, holding nothing.
func TestFineNewHoldWaitsForEveryUnsettledPostingStatus(t *testing.T) {
	t.Parallel()
	settled := map[charges.PostingStatus]bool{charges.PostingFailed: true, charges.PostingCancelled: true, charges.PostingAnnulled: true}
	for _, status := range charges.PostingStatuses {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, c, authorize := lapsedFineHold(ctx, t)
			_, err := b.pool.Exec(ctx, `UPDATE registry_postings SET status = $2 WHERE charge_id = $1`, c.ID, string(status))
			require.NoError(t, err)

			res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			if settled[status] {
				require.Equal(t, charges.Authorized, got.Status)
				require.Equal(t, []int64{500, 500}, authorizeAmounts(b))
				return
			}
			b.requireSnoozed(t, res, got, 0, retryBase, true)
			require.Equal(t, charges.Scheduled, got.Status)
			require.Equal(t, []int64{500}, authorizeAmounts(b), "no second hold while the old posting is %s", status)
		})
	}
}

// An earlier attempt's posting that settles between the new attempt's
// guard and the job's look at it leaves the attempt wanted with nothing
// holding it back: the job runs again rather than finish and leave the
// fine with no job to start its hold. The settling is made to land in
// that gap by a statement trigger on the guard's own UPDATE.
func TestFineHoldWhosePostingSettlesDuringTheGuardIsStillStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c, authorize := lapsedFineHold(ctx, t)
	_, err := b.pool.Exec(ctx, `CREATE FUNCTION settle_postings() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE registry_postings SET status = 'annulled' WHERE status = 'posting'; RETURN NULL; END $$;
		CREATE TRIGGER settle_postings AFTER UPDATE ON charges FOR EACH STATEMENT EXECUTE FUNCTION settle_postings()`)
	require.NoError(t, err)

	res, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, got.Status)
	require.Equal(t, []int64{500}, authorizeAmounts(b), "the guard held the hold back")
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "the job runs again, or the attempt is left with none")

	_, err = b.pool.Exec(ctx, `DROP TRIGGER settle_postings ON charges`)
	require.NoError(t, err)
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
	require.Equal(t, []int64{500, 500}, authorizeAmounts(b), "held again at the discount, once")
}

// lapsedFineHold is a fine held at the discount (500) whose first
// attempt's posting is still being posted when its hold lapses: the hold
// is voided and the second attempt is due, its authorize worker given.
func lapsedFineHold(ctx context.Context, t *testing.T) (*testBundle, charges.Charge,
	*rivertest.Worker[charges.AuthorizeArgs, pgx.Tx]) {
	t.Helper()
	b := setup(t)
	b.withHoldLifetime()
	b.pipeline.UnavailableFor = 2 * holdLifetime
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	b.pipeline.Postings = &fakePostings{}
	c := newFineCharge(ctx, t, b, start.Add(30*24*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	b.post(ctx, t, c, 1, 500, string(charges.PostingPosting))
	b.clock.Advance(holdLifetime - charges.HoldExpiryMargin)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.DueRetries(ctx, tx, b.clock.Now(), 10)
		return err
	}))
	return b, c, authorize
}
