package charges_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/testkit/fsmtest"
)

func TestRefundTransitions(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, charges.RefundMachine, map[charges.RefundStatus][]charges.RefundStatus{
		charges.RefundPending:   {charges.RefundSucceeded, charges.RefundFailed, charges.RefundUnknown},
		charges.RefundUnknown:   {charges.RefundSucceeded, charges.RefundFailed, charges.RefundPending},
		charges.RefundSucceeded: nil,
		charges.RefundFailed:    nil,
	})
	require.False(t, charges.RefundMachine.Can(charges.RefundSucceeded, charges.RefundFailed), "money returned stays returned")
	require.False(t, charges.RefundMachine.Can(charges.RefundFailed, charges.RefundPending),
		"a failed refund gave its reservation back: a new request makes a new refund, with a new key")
}

// No SQL names a refund's status: conditions are built from the
// constants. The simulated gateway keeps its own ledger.
func TestNoRefundStatusLiteral(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoLiterals(t, charges.RefundStatuses, "charges/gateway/sim")
	fsmtest.RequireNoSplices(t, charges.RefundStatuses)
}

func TestRefundKeys(t *testing.T) {
	t.Parallel()
	const chargeKey = "0190a1b2-0000-7000-8000-000000000001:2026-05"
	key := charges.RefundKey(chargeKey, 3)
	require.Equal(t, chargeKey+":r3:refund", key, "the key scheme is part of the OpenAPI document's decisions")
	k, n, ok := charges.ParseRefundKey(key)
	require.True(t, ok)
	require.Equal(t, chargeKey, k)
	require.Equal(t, 3, n)
	// A bill id may hold ':'; the number and the operation are the last
	// two parts.
	k, n, ok = charges.ParseRefundKey("0190a1b2-0000-7000-8000-000000000001:bill:7:r12:refund")
	require.True(t, ok)
	require.Equal(t, "0190a1b2-0000-7000-8000-000000000001:bill:7", k)
	require.Equal(t, 12, n)
	for _, bad := range []string{chargeKey + ":a1:capture", chargeKey + ":r0:refund", chargeKey + ":r01:refund",
		chargeKey + ":r1:capture", chargeKey + ":a1:refund", "r1:refund", chargeKey + ":r-1:refund", ""} {
		_, _, ok := charges.ParseRefundKey(bad)
		require.False(t, ok, bad)
	}
	_, _, _, ok = charges.ParseGatewayKey(key)
	require.False(t, ok, "a refund's key is not an attempt's: reconciliation tells them apart")
}

// refundOf requests a refund in its own committed transaction.
func (b *testBundle) refundOf(ctx context.Context, t *testing.T, req charges.RefundRequest) (charges.Refund, error) {
	t.Helper()
	var r charges.Refund
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		r, err = b.pipeline.Store.RequestRefund(ctx, tx, req, b.clock.Now())
		return err
	})
	return r, err
}

func (b *testBundle) reserved(ctx context.Context, t *testing.T, c charges.Charge) (reserved, refunded int64) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT refund_reserved, amount_refunded FROM charges WHERE id = $1`, c.ID).
		Scan(&reserved, &refunded))
	return reserved, refunded
}

func TestRefundPartialThenRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{status: charges.Succeeded, authorizationRef: holdRef})

	first, err := b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Amount: 500, Reason: charges.ReasonRequestedByCustomer,
		Actor: "key_support", Evidence: "ticket 4411"})
	require.NoError(t, err)
	require.Equal(t, 1, first.N)
	require.Equal(t, b.chargeKey()+":r1:refund", first.GatewayKey)
	require.Equal(t, charges.RefundPending, first.Status)
	require.Equal(t, int64(500), first.Amount)
	require.Equal(t, "EUR", first.Currency)
	require.Equal(t, "cus_1", first.CustomerID)

	rest, err := b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Reason: charges.ReasonDuplicate, Actor: "key_support"})
	require.NoError(t, err)
	require.Equal(t, 2, rest.N)
	require.Equal(t, int64(1999-500), rest.Amount, "no amount: all that is left")
	reserved, refunded := b.reserved(ctx, t, c)
	require.Equal(t, int64(1999), reserved)
	require.Zero(t, refunded, "nothing returned until the gateway says so")

	_, err = b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Amount: 1, Reason: charges.ReasonDuplicate, Actor: "key_support"})
	var exceeds *charges.RefundExceedsError
	require.ErrorAs(t, err, &exceeds)
	require.Equal(t, int64(0), exceeds.Remaining())
	_, err = b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Reason: charges.ReasonDuplicate, Actor: "key_support"})
	require.ErrorAs(t, err, &exceeds, "nothing left to refund")
	require.Equal(t, fault.Conflict, fault.CodeOf(err))

	// A failed refund gives its reservation back; a succeeded one counts
	// as refunded; all refunded, the charge stays succeeded.
	var settled charges.Refund
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var moved bool
		settled, moved, err = b.pipeline.Store.SettleRefund(ctx, tx, first.ID, charges.RefundFailed, b.clock.Now())
		require.True(t, moved)
		return err
	}))
	require.Equal(t, charges.RefundFailed, settled.Status)
	require.NotNil(t, settled.SettledAt)
	reserved, _ = b.reserved(ctx, t, c)
	require.Equal(t, int64(1999-500), reserved)
	again, err := b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Reason: charges.ReasonDuplicate, Actor: "key_support"})
	require.NoError(t, err)
	require.Equal(t, 3, again.N, "a new refund, with a new key")
	require.Equal(t, int64(500), again.Amount)
	for _, id := range []charges.Refund{rest, again} {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, _, err := b.pipeline.Store.SettleRefund(ctx, tx, id.ID, charges.RefundSucceeded, b.clock.Now())
			return err
		}))
	}
	reserved, refunded = b.reserved(ctx, t, c)
	require.Equal(t, int64(1999), reserved)
	require.Equal(t, int64(1999), refunded)
	got := b.get(ctx, t, c.ID)
	require.Equal(t, charges.Succeeded, got.Status)
	require.Equal(t, int64(1999), got.AmountRefunded)

	// Settling twice changes nothing: the guard holds it back.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, moved, err := b.pipeline.Store.SettleRefund(ctx, tx, rest.ID, charges.RefundSucceeded, b.clock.Now())
		require.False(t, moved)
		return err
	}))
	_, refunded = b.reserved(ctx, t, c)
	require.Equal(t, int64(1999), refunded)
	var events []string
	rows, err := b.pool.Query(ctx, `SELECT type FROM events WHERE object_id = ANY($1) ORDER BY created_at, id`,
		[]any{first.ID, rest.ID, again.ID, c.ID})
	require.NoError(t, err)
	events, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, 1, count(events, "charge.refunded"), "%v", events)
	require.Equal(t, 3, count(events, "refund.created"), "%v", events)
	require.Equal(t, 2, count(events, "refund.succeeded"), "%v", events)
	require.Equal(t, 1, count(events, "refund.failed"), "%v", events)

	list, err := charges.RefundsOf(ctx, b.pool, c.ID)
	require.NoError(t, err)
	require.Len(t, list, 3)
	settledNow, err := charges.RefundsSettled(ctx, b.pool, "", b.clock.Now().Add(-time.Second), b.clock.Now().Add(time.Second))
	require.NoError(t, err)
	require.Len(t, settledNow, 2, "succeeded ones only")
}

func count(xs []string, x string) int {
	n := 0
	for _, s := range xs {
		if s == x {
			n++
		}
	}
	return n
}

func TestRefundRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req := func(c charges.Charge, amount int64) charges.RefundRequest {
		return charges.RefundRequest{ChargeID: c.ID, Amount: amount, Reason: charges.ReasonFraudulent, Actor: "key_admin"}
	}
	c := b.newCharge(ctx, t, fixture{status: charges.Succeeded, authorizationRef: holdRef})

	_, err := b.refundOf(ctx, t, req(c, 2000))
	var exceeds *charges.RefundExceedsError
	require.ErrorAs(t, err, &exceeds, "above the capture")
	require.Equal(t, charges.RefundExceedsError{Requested: 2000, Captured: 1999, Reserved: 0, Currency: "EUR"}, *exceeds)
	reserved, _ := b.reserved(ctx, t, c)
	require.Zero(t, reserved, "nothing reserved by a refusal")

	_, err = b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Amount: 1, Reason: "changed_mind", Actor: "key_admin"})
	require.ErrorIs(t, err, charges.ErrRefundReason)
	_, err = b.refundOf(ctx, t, req(c, -5))
	require.Equal(t, fault.Invalid, fault.CodeOf(err))

	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'authorized' WHERE id = $1`, c.ID)
	require.NoError(t, err)
	_, err = b.refundOf(ctx, t, req(c, 100))
	require.ErrorIs(t, err, charges.ErrNotRefundable)

	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded', registry_uin = '18810192085434147023' WHERE id = $1`, c.ID)
	require.NoError(t, err)
	_, err = b.refundOf(ctx, t, req(c, 100))
	require.ErrorIs(t, err, charges.ErrFineNotRefundable)
	_, err = b.refundOf(ctx, t, req(c, 0))
	require.ErrorIs(t, err, charges.ErrFineNotRefundable)

	n := 0
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM refunds`).Scan(&n))
	require.Zero(t, n)

	// A move the machine forbids is refused before any statement.
	_, err = charges.RefundMachine.Move(charges.RefundPending, charges.RefundSucceeded)
	var te *fsm.TransitionError
	require.True(t, errors.As(err, &te))
}

// Requests race on their own connections, as on two nodes: the sum
// reserved never passes the capture, each refused one is refused by the
// guard, and the numbers n are 1..k without a gap.
func TestConcurrentRefundsNeverExceedTheCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, mode := range []string{"fixed", "rest", "mixed"} {
		t.Run(mode, func(t *testing.T) {
			c := b.newChargeFor(ctx, t, mode)
			const racers = 16
			var wg sync.WaitGroup
			results := make([]charges.Refund, racers)
			errs := make([]error, racers)
			startLine := make(chan struct{})
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					amount := int64(300)
					if mode == "rest" || (mode == "mixed" && i%3 == 0) {
						amount = 0
					}
					<-startLine
					results[i], errs[i] = b.refundOf(ctx, t, charges.RefundRequest{ChargeID: c.ID, Amount: amount,
						Reason: charges.ReasonDuplicate, Actor: fmt.Sprintf("node%d", i%2)})
				}()
			}
			close(startLine)
			wg.Wait()
			var sum int64
			ns := map[int]bool{}
			for i, err := range errs {
				if err != nil {
					var exceeds *charges.RefundExceedsError
					require.ErrorAs(t, err, &exceeds, "racer %d", i)
					continue
				}
				sum += results[i].Amount
				ns[results[i].N] = true
			}
			reserved, _ := b.reserved(ctx, t, c)
			require.Equal(t, sum, reserved)
			require.LessOrEqual(t, sum, int64(1999))
			switch mode {
			case "fixed":
				require.Len(t, ns, 6, "6 × 300 fit in 1999, a 7th does not")
			case "rest":
				require.Len(t, ns, 1, "one takes the rest, the others find nothing left")
				require.Equal(t, int64(1999), sum)
			case "mixed":
				require.Equal(t, int64(1999), sum, "a request for the rest took what the others left")
			}
			for n := 1; n <= len(ns); n++ {
				require.True(t, ns[n], "refund %d of %v", n, ns)
			}
		})
	}
}

// newChargeFor is a succeeded charge of its own period.
func (b *testBundle) newChargeFor(ctx context.Context, t *testing.T, period string) charges.Charge {
	t.Helper()
	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: "refund-" + period, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard}}, b.clock.Now())
		if err != nil {
			return err
		}
		return dropJobs(ctx, tx, created)
	}))
	_, err := b.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded', attempt_count = 1, authorization_ref = $2 WHERE id = $1`,
		created[0].ID, holdRef)
	require.NoError(t, err)
	return b.get(ctx, t, created[0].ID)
}
