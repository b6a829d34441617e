package charges_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// pendingRefund is a refund of 700 of a captured charge, its send job not
// run yet.
func (b *testBundle) pendingRefund(ctx context.Context, t *testing.T) (charges.Charge, charges.Refund) {
	t.Helper()
	c := b.newCharge(ctx, t, fixture{status: charges.Succeeded, authorizationRef: holdRef})
	r, err := b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Amount: 700, Reason: charges.ReasonDuplicate, Actor: "support:k1"})
	require.NoError(t, err)
	return c, r
}

func (b *testBundle) send(ctx context.Context, r charges.Refund) error {
	return b.pipeline.SendRefund(ctx, &river.Job[charges.RefundSendArgs]{Args: charges.RefundSendArgs{RefundID: r.ID},
		JobRow: &rivertype.JobRow{Attempt: 1, MaxAttempts: 5}})
}

func (b *testBundle) lookUp(ctx context.Context, r charges.Refund) error {
	return b.pipeline.LookUpRefund(ctx, &river.Job[charges.RefundLookupArgs]{Args: charges.RefundLookupArgs{RefundID: r.ID},
		JobRow: &rivertype.JobRow{Attempt: 1, MaxAttempts: 5}})
}

func (b *testBundle) refund(ctx context.Context, t *testing.T, id uuid.UUID) charges.Refund {
	t.Helper()
	r, err := charges.GetRefund(ctx, b.pool, id)
	require.NoError(t, err)
	return r
}

func (b *testBundle) lookupJobs(ctx context.Context, t *testing.T, r charges.Refund) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'refund_lookup' AND args->>'refund_id' = $1`,
		r.ID.String()).Scan(&n))
	return n
}

func refunded(ref string) gateway.Result {
	return gateway.Result{Op: gateway.OpRefund, Status: gateway.StatusSucceeded, Reference: ref}
}

func TestSendRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Succeeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(refunded("re_1"), nil)
		require.NoError(t, b.send(ctx, r))
		got := b.refund(ctx, t, r.ID)
		require.Equal(t, charges.RefundSucceeded, got.Status)
		require.Equal(t, "re_1", got.GatewayRef)
		require.NotNil(t, got.SentAt)
		calls := b.gateway.CallsOf(gateway.OpRefund)
		require.Len(t, calls, 1)
		req := calls[0].Request
		require.Equal(t, b.chargeKey()+":r1:refund", req.IdempotencyKey)
		require.Equal(t, holdRef, req.AuthorizationID, "the payment is named as its capture named it")
		require.Equal(t, int64(700), req.Amount)
		require.Equal(t, "EUR", req.Currency)
		require.Empty(t, req.Token, "a refund carries no card")
		require.Equal(t, int64(700), b.get(ctx, t, c.ID).AmountRefunded)

		// The job again, or late: nothing is sent.
		require.NoError(t, b.send(ctx, r))
		require.Len(t, b.gateway.CallsOf(gateway.OpRefund), 1)
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusFailed, DeclineCode: "amount_exceeds_captured"}, nil)
		require.NoError(t, b.send(ctx, r))
		got := b.refund(ctx, t, r.ID)
		require.Equal(t, charges.RefundFailed, got.Status)
		require.Equal(t, "amount_exceeds_captured", got.FailureCode)
		reserved, refundedSum := b.reserved(ctx, t, c)
		require.Zero(t, reserved, "a failed refund gives its reservation back")
		require.Zero(t, refundedSum)
	})

	t.Run("AdapterCannotRefund", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, errors.New("refunds are not implemented by this adapter yet"))
		require.NoError(t, b.send(ctx, r))
		got := b.refund(ctx, t, r.ID)
		require.Equal(t, charges.RefundFailed, got.Status)
		require.Equal(t, "gateway_error", got.FailureCode)
	})

	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
		require.ErrorIs(t, b.send(ctx, r), gateway.ErrUnavailable, "River sends it again")
		require.Equal(t, charges.RefundPending, b.refund(ctx, t, r.ID).Status)
		b.gateway.RefundFunc = gatewaytest.Answer(refunded("re_1"), nil)
		require.NoError(t, b.send(ctx, r))
		keys := b.gateway.Keys(gateway.OpRefund)
		require.Equal(t, []string{r.GatewayKey, r.GatewayKey}, keys, "the same key both times")
		require.Equal(t, charges.RefundSucceeded, b.refund(ctx, t, r.ID).Status)
	})
}

// A send River would give up after, with no verdict from the gateway,
// hands the refund to a look-up: a refund never stays pending with no job,
// and an earlier run may have reached the gateway before a crash.
func TestLastSendTryWithoutAnswerIsLookedUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, r := b.pendingRefund(ctx, t)
	b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	job := &river.Job[charges.RefundSendArgs]{Args: charges.RefundSendArgs{RefundID: r.ID}}
	job.JobRow = &rivertype.JobRow{Attempt: 3, MaxAttempts: 5}
	require.Error(t, b.pipeline.SendRefund(ctx, job))
	require.Equal(t, charges.RefundPending, b.refund(ctx, t, r.ID).Status, "not the last try: River sends it again")
	job.JobRow = &rivertype.JobRow{Attempt: 5, MaxAttempts: 5}
	require.NoError(t, b.pipeline.SendRefund(ctx, job))
	require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status)
	require.Equal(t, 1, b.lookupJobs(ctx, t, r))
}

// A look-up is a refund's last job: a gateway down for longer than
// River's attempts would last is waited for, each run snoozed (no attempt
// spent), never given up with the refund left open and no job.
func TestRefundLookUpWaitsOutItsGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, r := b.pendingRefund(ctx, t)
	b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
	require.NoError(t, b.send(ctx, r))
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrNotFound)
	b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	for run := 1; run <= 3; run++ { // fewer calls than open the circuit
		job := &river.Job[charges.RefundLookupArgs]{Args: charges.RefundLookupArgs{RefundID: r.ID},
			JobRow: &rivertype.JobRow{Attempt: 1, MaxAttempts: 5, Metadata: []byte(fmt.Sprintf(`{"snoozes": %d}`, run-1))}}
		var snooze *rivertype.JobSnoozeError
		require.ErrorAs(t, b.pipeline.LookUpRefund(ctx, job), &snooze, "run %d waits, spending no attempt", run)
		require.Positive(t, snooze.Duration)
	}
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnavailable)
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, b.lookUp(ctx, r), &snooze, "a look-up the gateway does not answer waits too")
	require.Equal(t, charges.RefundPending, b.refund(ctx, t, r.ID).Status, "sent again with no verdict: still the look-up's")

	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrNotFound)
	b.gateway.RefundFunc = gatewaytest.Answer(refunded("re_3"), nil)
	require.NoError(t, b.lookUp(ctx, r))
	require.Equal(t, charges.RefundSucceeded, b.refund(ctx, t, r.ID).Status)
	keys := b.gateway.Keys(gateway.OpRefund)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.Equal(t, r.GatewayKey, k, "only ever under its own key")
	}
}

// Errors other than the gateway's (the database failing over, a pool
// cut) spend River's attempts, but the last one is not spent: the look-up
// is snoozed rather than discarded, which would leave the refund unknown
// with no job.
func TestRefundLookUpIsNeverGivenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, r := b.pendingRefund(ctx, t)
	b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
	require.NoError(t, b.send(ctx, r))
	require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status)
	b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, errors.New("connection reset by the database proxy"))
	job := func(attempt int) *river.Job[charges.RefundLookupArgs] {
		return &river.Job[charges.RefundLookupArgs]{Args: charges.RefundLookupArgs{RefundID: r.ID},
			JobRow: &rivertype.JobRow{Attempt: attempt, MaxAttempts: 5}}
	}
	err := b.pipeline.LookUpRefund(ctx, job(4))
	require.Error(t, err)
	var snooze *rivertype.JobSnoozeError
	require.False(t, errors.As(err, &snooze), "not the last attempt: River retries it")
	require.ErrorAs(t, b.pipeline.LookUpRefund(ctx, job(5)), &snooze, "the last attempt waits")
	require.Positive(t, snooze.Duration)
	require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status)

	b.gateway.LookupFunc = gatewaytest.LookupAnswer(refunded("re_9"), nil)
	require.NoError(t, b.pipeline.LookUpRefund(ctx, job(5)))
	require.Equal(t, charges.RefundSucceeded, b.refund(ctx, t, r.ID).Status)
}

// A send's last try that cannot reach the database (failing over) waits
// and runs again rather than be discarded with the refund pending and no
// job; before its last try River retries it as any job.
func TestRefundSendIsNeverGivenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, r := b.pendingRefund(ctx, t)
	down, err := pgxpool.New(ctx, b.pool.Config().ConnString())
	require.NoError(t, err)
	down.Close()
	pool := b.pipeline.Pool
	b.pipeline.Pool = down
	job := func(attempt int) *river.Job[charges.RefundSendArgs] {
		return &river.Job[charges.RefundSendArgs]{Args: charges.RefundSendArgs{RefundID: r.ID},
			JobRow: &rivertype.JobRow{Attempt: attempt, MaxAttempts: 5}}
	}
	err = b.pipeline.SendRefund(ctx, job(4))
	var snooze *rivertype.JobSnoozeError
	require.Error(t, err)
	require.False(t, errors.As(err, &snooze), "not the last attempt: River retries it")
	require.ErrorAs(t, b.pipeline.SendRefund(ctx, job(5)), &snooze, "the last attempt waits")
	b.pipeline.Pool = pool
	require.Equal(t, charges.RefundPending, b.refund(ctx, t, r.ID).Status)
	require.Empty(t, b.gateway.Keys(gateway.OpRefund), "nothing sent while the database was away")

	b.gateway.RefundFunc = gatewaytest.Answer(refunded("re_5"), nil)
	require.NoError(t, b.pipeline.SendRefund(ctx, job(5)))
	require.Equal(t, charges.RefundSucceeded, b.refund(ctx, t, r.ID).Status)
}

func TestLostRefundAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FoundByItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
		require.NoError(t, b.send(ctx, r))
		require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status)
		require.Equal(t, 1, b.lookupJobs(ctx, t, r), "its look-up is enqueued with the move")
		reserved, _ := b.reserved(ctx, t, c)
		require.Equal(t, int64(700), reserved, "an unknown refund keeps its reservation")

		b.gateway.LookupFunc = gatewaytest.Found(map[string]gateway.Result{r.GatewayKey: refunded("re_9")})
		require.NoError(t, b.lookUp(ctx, r))
		got := b.refund(ctx, t, r.ID)
		require.Equal(t, charges.RefundSucceeded, got.Status)
		require.Equal(t, "re_9", got.GatewayRef)
		require.Len(t, b.gateway.CallsOf(gateway.OpRefund), 1, "never sent again")
		look := b.gateway.CallsOf(gatewaytest.OpLookup)[0].Lookup
		require.Equal(t, gateway.OpRefund, look.Op)
		require.Equal(t, r.GatewayKey, look.Request.IdempotencyKey)
		require.False(t, look.SentAt.IsZero(), "a look-up knows since when the key was used")
		require.Equal(t, int64(700), b.get(ctx, t, c.ID).AmountRefunded)
	})

	t.Run("NeverArrivedIsSentAgainUnderItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
		require.NoError(t, b.send(ctx, r))
		b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrNotFound)
		// The resend loses its answer too: it stays with the look-up, which
		// waits without spending an attempt.
		var snooze *rivertype.JobSnoozeError
		require.ErrorAs(t, b.lookUp(ctx, r), &snooze)
		require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status)
		b.gateway.RefundFunc = gatewaytest.Answer(refunded("re_2"), nil)
		require.NoError(t, b.lookUp(ctx, r))
		require.Equal(t, charges.RefundSucceeded, b.refund(ctx, t, r.ID).Status)
		require.Equal(t, []string{r.GatewayKey, r.GatewayKey, r.GatewayKey}, b.gateway.Keys(gateway.OpRefund),
			"only ever under its own key")
	})

	t.Run("Unprovable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, r := b.pendingRefund(ctx, t)
		b.gateway.RefundFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnknownOutcome)
		require.NoError(t, b.send(ctx, r))
		b.gateway.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnprovable)
		require.NoError(t, b.lookUp(ctx, r))
		require.Equal(t, charges.RefundUnknown, b.refund(ctx, t, r.ID).Status, "neither done nor not done is assumed")
		require.Len(t, b.gateway.CallsOf(gateway.OpRefund), 1)
		stuck, err := charges.RefundsStuckUnknown(ctx, b.pool, b.clock.Now().Add(time.Second))
		require.NoError(t, err)
		require.Len(t, stuck, 1)
		counts, err := charges.CountRefundsUnknown(ctx, b.pool)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{b.gateway.Name(): 1}, counts)
	})
}

func TestRefundReceipt(t *testing.T) {
	t.Parallel()
	paid := gateway.Receipt{Customer: gateway.ReceiptCustomer{Email: "a@example.com"}, Items: []gateway.ReceiptItem{
		{Description: "Housing, March", Quantity: "1", Amount: 3000, VATCode: 1},
		{Description: "Fee", Quantity: "2", Amount: 500, VATCode: 1}}}
	full := charges.RefundReceipt(paid, 4000, 4000)
	require.Equal(t, paid, *full)
	part := charges.RefundReceipt(paid, 1200, 4000)
	require.Equal(t, []gateway.ReceiptItem{{Description: "Housing, March", Quantity: "1", Amount: 1200, VATCode: 1}}, part.Items)
	require.Equal(t, paid.Customer, part.Customer)
	require.Len(t, paid.Items, 2, "the payment's receipt is not changed")
}
