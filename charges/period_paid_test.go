package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// What a period paid counts its own charge and its adjustments, and no
// other period's (a restarted schedule's key that begins with the same
// date included); refunds are taken off; any of them in flight says so.
func TestPaidForPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	key := periodStart.Format(time.DateOnly)
	add := func(periodKey string, amount int64, status charges.Status, refunded int64) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			created, err := b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
				PeriodKey: periodKey, PeriodStart: periodStart, Amount: amount, Currency: "EUR", Gateway: b.gateway.Name(),
				Token: currentCard}}, b.clock.Now())
			if err != nil {
				return err
			}
			if err := dropJobs(ctx, tx, created); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE charges SET status = $2, refund_reserved = $3, amount_refunded = $3 WHERE id = $1`,
				created[0].ID, string(status), refunded)
			return err
		}))
	}
	paid := func() charges.PeriodPaid {
		t.Helper()
		p, err := charges.PaidForPeriod(ctx, b.pool, b.subscriptionID, key)
		require.NoError(t, err)
		return p
	}
	require.Equal(t, charges.PeriodPaid{}, paid(), "no charge: nothing")
	add(key, 1000, charges.Succeeded, 100)
	add(charges.AdjustmentKey(key, uuid.New()), 300, charges.Succeeded, 0)
	add(charges.AdjustmentKey(key, uuid.New()), 50, charges.Failed, 0)
	add(key+"~0a1b2c3d", 7000, charges.Succeeded, 0)
	add(charges.AdjustmentKey(key+"~0a1b2c3d", uuid.New()), 70, charges.Capturing, 0)
	require.Equal(t, charges.PeriodPaid{Captured: 1200}, paid())
	add(charges.AdjustmentKey(key, uuid.New()), 40, charges.RequiresReview, 0)
	require.Equal(t, charges.PeriodPaid{Captured: 1200, InFlight: true}, paid())
}
