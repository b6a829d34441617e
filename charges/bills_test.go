package charges_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// fakeEnrollments is the enrollment side of the pipeline for bills'
// charges: Lock locks the real enrollment row; outcomes are recorded.
type fakeEnrollments struct {
	mu       sync.Mutex
	recorded []string
}

func (e *fakeEnrollments) Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (charges.OwnerState, error) {
	var found uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT id FROM enrollments WHERE id = $1 FOR UPDATE`, id).Scan(&found); err != nil {
		return charges.OwnerState{}, fmt.Errorf("lock enrollment: %w", err)
	}
	return charges.OwnerState{Gateway: "fake", Token: currentCard}, nil
}

func (e *fakeEnrollments) record(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recorded = append(e.recorded, s)
}

func (e *fakeEnrollments) ChargePaid(context.Context, pgx.Tx, charges.Charge, bool) (*time.Time, error) {
	e.record("paid")
	return nil, nil
}

func (e *fakeEnrollments) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error {
	e.record("declined")
	return nil
}

func (e *fakeEnrollments) ChargeFailed(context.Context, pgx.Tx, charges.Charge) (*time.Time, error) {
	e.record("failed")
	return nil, nil
}

// newBillCharge inserts an enrollment and the charge of its fine, held
// at 500 until deadline and at 1000 after.
func newBillCharge(ctx context.Context, t *testing.T, b *testBundle, deadline time.Time) (charges.Charge, bool) {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'fake', $2, 12, 2030, $3, $3)`,
		enrollmentID, currentCard, start)
	require.NoError(t, err)
	var c charges.Charge
	var created bool
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, created, err = b.pipeline.Store.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: "18800000000000000008", Due: start, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "fake", Token: currentCard}, start)
		return err
	}))
	return c, created
}

// A bill's charge is one per enrollment and bill id.
func TestCreateForBillIsOnePerBill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c, created := newBillCharge(ctx, t, b, start.Add(time.Hour))
	require.True(t, created)
	require.Equal(t, c.EnrollmentID.String()+":18800000000000000008", c.Key())
	var again charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		again, created, err = b.pipeline.Store.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: c.EnrollmentID, CustomerID: "cus_1",
			BillID: "18800000000000000008", Due: start, Amount: 700, Currency: "RUB", Gateway: "fake", Token: currentCard}, start)
		return err
	}))
	require.False(t, created)
	require.Equal(t, c.ID, again.ID)
	require.EqualValues(t, 500, again.Amount, "the first charge stands")
}

// A hold placed at the discounted price that is not captured by the
// deadline is voided, never captured; the new attempt (a new key) is held
// and captured at the full price.
func TestDiscountedHoldNotCapturedByTheDeadlineIsMadeAgainInFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	owner := &fakeEnrollments{}
	b.pipeline.Owners.Enrollments = owner
	deadline := start.Add(2 * time.Hour)
	c, _ := newBillCharge(ctx, t, b, deadline)

	var mu sync.Mutex
	amounts := map[string]int64{}
	b.gateway.AuthorizeFunc = func(_ context.Context, req gateway.Request) (gateway.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		amounts[req.IdempotencyKey] = req.Amount
		return succeeded, nil
	}
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)

	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	held := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Authorized, held.Status)
	require.EqualValues(t, 500, held.Amount)

	b.clock.Advance(3 * time.Hour) // the capture comes after the deadline
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status, "not captured")
	rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, b.driver, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)

	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	waiting := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Declined, waiting.Status)
	require.Equal(t, "discount_ended", waiting.FailureCode)
	require.True(t, waiting.NextAttemptAt.Equal(b.clock.Now()), "a new attempt is due at once")

	var retried []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		retried, err = b.pipeline.Store.DueRetries(ctx, tx, b.clock.Now(), 10)
		return err
	}))
	require.Len(t, retried, 1)
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	full := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Authorized, full.Status)
	require.EqualValues(t, 1000, full.Amount, "the amount is fixed when the hold is placed")

	b.gateway.CaptureFunc = gatewaytest.Answer(succeeded, nil)
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)

	key := c.Key()
	require.Equal(t, map[string]int64{key + ":a1:authorize": 500, key + ":a2:authorize": 1000}, amounts)
	var captures []string
	for _, call := range b.gateway.Calls() {
		if call.Op == gateway.OpCapture {
			captures = append(captures, call.Key)
		}
	}
	require.Equal(t, []string{key + ":a2:capture"}, captures, "only the full-price hold was captured")
	require.Equal(t, []string{"paid"}, owner.recorded)
}

// A bill's hold that lapsed before its capture is released and made again
// on the enrollment's card, as a subscription's is. The new attempt read
// the card from the subscriptions, by the bill charge's empty subscription
// id, so the step failed after the void at every run until the charge went
// to review.
func TestBillsExpiredHoldIsAuthorizedAgainOnTheEnrollmentsCard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.withHoldLifetime()
	b.pipeline.UnavailableFor = 2 * holdLifetime
	owner := &fakeEnrollments{}
	b.pipeline.Owners.Enrollments = owner
	c, _ := newBillCharge(ctx, t, b, start.Add(3*holdLifetime)) // the discount outlasts the test

	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)

	b.gateway.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	res, err := capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Capturing, b.get(ctx, t, c.ID).Status)

	b.clock.Advance(holdLifetime)
	b.gateway.LookupFunc = gatewaytest.Found(nil)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	_, err = capture.WorkJob(ctx, t, b.tx, res.Job)
	require.NoError(t, err)
	again := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, again.Status)
	require.Equal(t, 2, again.AttemptCount)
	require.Equal(t, charges.FailureHoldExpired, again.FailureCode)

	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	b.gateway.CaptureFunc = gatewaytest.Answer(succeeded, nil)
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, b.get(ctx, t, c.ID).Status)
	var captures, voids []string
	for _, call := range b.gateway.Calls() {
		switch call.Op {
		case gateway.OpCapture:
			captures = append(captures, call.Key)
		case gateway.OpVoid:
			voids = append(voids, call.Key)
		}
	}
	require.Equal(t, []string{c.Key() + ":a1:void"}, voids, "the lapsed hold is released once")
	require.Equal(t, c.Key()+":a2:capture", captures[len(captures)-1])
	require.Equal(t, []string{"paid"}, owner.recorded)
}

func (e *fakeEnrollments) ConfirmationRequired(_ context.Context, _ pgx.Tx, c charges.Charge) error {
	e.record(fmt.Sprintf("confirmation_required:%d", c.Amount))
	return nil
}

func (e *fakeEnrollments) PaidOutside(_ context.Context, _ pgx.Tx, c charges.Charge, inFull bool) error {
	e.record(fmt.Sprintf("paid outside %d (in full: %t)", c.PaidOutside, inFull))
	return nil
}

func (e *fakeEnrollments) ChargeExpired(context.Context, pgx.Tx, charges.Charge) error {
	e.record("expired")
	return nil
}

// newCappedBillCharge is newBillCharge for an enrollment whose cap is
// maxAmount (the fine costs 500 until deadline, 1000 after) and whose
// attempts may start until payUntil.
func newCappedBillCharge(ctx context.Context, t *testing.T, b *testBundle, deadline time.Time, maxAmount int64, payUntil time.Time) charges.Charge {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', $4, 'fake', $2, 12, 2030, $3, $3)`,
		enrollmentID, currentCard, start, maxAmount)
	require.NoError(t, err)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, _, err = b.pipeline.Store.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: "18800000000000000008", Due: start, Amount: 500, FullAmount: 1000, DiscountUntil: &deadline,
			Currency: "RUB", Gateway: "fake", Token: currentCard, MaxAmount: maxAmount, PayUntil: payUntil}, start)
		return err
	}))
	return c
}

// authorizeAmounts lists the amounts of the authorize calls the gateway got.
func authorizeAmounts(b *testBundle) []int64 {
	var out []int64
	for _, call := range b.gateway.Calls() {
		if call.Op == gateway.OpAuthorize {
			out = append(out, call.Request.Amount)
		}
	}
	return out
}

// The cap holds at the full price: an authorize whose outcome was unknown
// while the discount deadline passed is found held at the discounted price,
// released, and its new attempt, at the full price above the cap, is not
// sent: it waits, flagged, for the customer's confirmation. A confirmation
// at the full price lets it go; a confirmation covers only the amount
// confirmed.
func TestFullPriceAboveTheCapWaitsForConfirmation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	owner := &fakeEnrollments{}
	b.pipeline.Owners.Enrollments = owner
	deadline := start.Add(2 * time.Hour)
	c := newCappedBillCharge(ctx, t, b, deadline, 600, start.Add(30*24*time.Hour))

	b.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Unknown, b.get(ctx, t, c.ID).Status)

	b.clock.Advance(3 * time.Hour) // the deadline passes while the outcome is unknown
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(succeeded, nil)
	reconcile := newWorker(t, b, &charges.LookupWorker{Pipeline: b.pipeline})
	_, err = reconcile.Work(ctx, t, b.tx, charges.LookupArgs{ChargeID: c.ID, Attempt: 1, Op: gateway.OpAuthorize}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
	capture := newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline})
	_, err = capture.Work(ctx, t, b.tx, charges.CaptureArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Declined, b.get(ctx, t, c.ID).Status)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.DueRetries(ctx, tx, b.clock.Now(), 10)
		return err
	}))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	waiting := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Scheduled, waiting.Status, "the attempt above the cap did not start")
	require.True(t, waiting.ConfirmationRequired)
	require.EqualValues(t, 1000, waiting.Amount, "it shows what it would take")
	require.Equal(t, []int64{500}, authorizeAmounts(b), "no authorize above the cap was sent")
	require.Equal(t, []string{"confirmation_required:1000"}, owner.recorded)

	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{500}, authorizeAmounts(b), "a rerun sends nothing either")
	require.Len(t, owner.recorded, 1, "and tells the owner once")

	// A confirmation of less than the price does not let it go.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.Confirm(ctx, tx, c.ID, 900, b.clock.Now())
		return err
	}))
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 3}, nil)
	require.NoError(t, err)
	require.True(t, b.get(ctx, t, c.ID).ConfirmationRequired, "900 confirmed does not cover 1000")
	require.Equal(t, []int64{500}, authorizeAmounts(b))

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.Confirm(ctx, tx, c.ID, 1000, b.clock.Now())
		return err
	}))
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.Confirm(ctx, tx, c.ID, 1000, b.clock.Now())
		require.ErrorIs(t, err, charges.ErrStale, "confirming a charge that awaits nothing changes nothing")
		return nil
	}))
	_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 4}, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{500, 1000}, authorizeAmounts(b), "the confirmed full price is sent")
	confirmed := b.get(ctx, t, c.ID)
	require.EqualValues(t, 1000, confirmed.ConfirmedAmount)
	require.Equal(t, charges.Authorized, confirmed.Status)
	require.Equal(t, 4, confirmed.AttemptCount, "a confirmation starts a new attempt with new keys")
}

// No attempt of a bill starts at or after its last moment: the scheduled
// charge that reaches it is voided as bill_expired, nothing is sent, and
// the owner is told.
func TestNoBillAttemptStartsAfterItsLastMoment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	owner := &fakeEnrollments{}
	b.pipeline.Owners.Enrollments = owner
	c := newCappedBillCharge(ctx, t, b, start.Add(240*time.Hour), 100000, start.Add(time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	b.clock.Advance(time.Hour)
	authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Voided, got.Status)
	require.Equal(t, "bill_expired", got.FailureCode)
	require.Empty(t, authorizeAmounts(b))
	require.Equal(t, []string{"expired"}, owner.recorded)
}

// A person's retry of a bill's charge past the bill's last moment is
// refused: no attempt is numbered, and the charge stays where it was.
func TestRetryPastABillsLastMomentIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := newCappedBillCharge(ctx, t, b, start.Add(240*time.Hour), 100000, start.Add(time.Hour))
	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2, review_reason = 'a person looks' WHERE id = $1`,
		c.ID, string(charges.RequiresReview))
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	c = b.get(ctx, t, c.ID)
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.pipeline.Store.RetryFromReview(ctx, tx, c, "fake", "tok_other", b.clock.Now())
		return err
	})
	require.ErrorIs(t, err, charges.ErrRetryRefused)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.RequiresReview, got.Status)
	require.Equal(t, 1, got.AttemptCount)
	require.Empty(t, authorizeAmounts(b))
}

// An attempt of a fine that starts at or after its last discounted start
// (PostingDiscountMargin before the discount ends) is at the full price: a
// hold at the discounted price could no longer be posted to the registry
// and captured in time, and would only be voided. The cap applies to that
// price: above it, the attempt waits for the customer's confirmation. One
// that starts just before is at the discounted price.
func TestFineAttemptAfterItsLastDiscountedStartIsAtTheFullPrice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		left      time.Duration // of the discount when the attempt starts
		maxAmount int64
		want      int64 // held for; 0: nothing sent, a confirmation asked
	}{
		{"half an hour left", 30 * time.Minute, 100000, 1000},
		{"at the last discounted start", charges.PostingDiscountMargin, 100000, 1000},
		{"just before it", charges.PostingDiscountMargin + time.Second, 100000, 500},
		{"half an hour left, above the cap", 30 * time.Minute, 600, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			owner := &fakeEnrollments{}
			b.pipeline.Owners.Enrollments = owner
			c := newCappedBillCharge(ctx, t, b, start.Add(tc.left), tc.maxAmount, start.Add(30*24*time.Hour))
			b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
			authorize := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
			_, err := authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
			require.NoError(t, err)
			got := b.get(ctx, t, c.ID)
			if tc.want != 0 {
				require.Equal(t, charges.Authorized, got.Status)
				require.Equal(t, tc.want, got.Amount)
				require.Equal(t, []int64{tc.want}, authorizeAmounts(b))
				return
			}
			require.Equal(t, charges.Scheduled, got.Status, "nothing sent above the cap")
			require.True(t, got.ConfirmationRequired)
			require.EqualValues(t, 1000, got.Amount, "it shows what it would take")
			require.Empty(t, authorizeAmounts(b))
			require.Equal(t, []string{"confirmation_required:1000"}, owner.recorded)

			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.pipeline.Store.Confirm(ctx, tx, c.ID, 1000, b.clock.Now())
				return err
			}))
			_, err = authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2}, nil)
			require.NoError(t, err)
			require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
			require.Equal(t, []int64{1000}, authorizeAmounts(b), "the confirmed full price is sent")
		})
	}
}
