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

// answeringOwner answers the engine's reports as the test says, and
// records what it was told.
type answeringOwner struct {
	notOwedSince, dunningEnded *time.Time
	owesMore                   []bool
}

func (o *answeringOwner) Lock(context.Context, pgx.Tx, uuid.UUID) (charges.OwnerState, error) {
	return charges.OwnerState{}, nil
}

func (o *answeringOwner) ChargePaid(_ context.Context, _ pgx.Tx, _ charges.Charge, owesMore bool) (*time.Time, error) {
	o.owesMore = append(o.owesMore, owesMore)
	return o.notOwedSince, nil
}

func (o *answeringOwner) ChargeDeclined(context.Context, pgx.Tx, uuid.UUID) error { return nil }

func (o *answeringOwner) ChargeFailed(context.Context, pgx.Tx, charges.Charge) (*time.Time, error) {
	return o.dunningEnded, nil
}

// period adds a charge of the bundle's subscription for the period that
// begins at begins, in status (scheduled or declined).
func (b *testBundle) period(ctx context.Context, t *testing.T, begins time.Time, status charges.Status) charges.Charge {
	t.Helper()
	var created []charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		created, err = b.pipeline.Store.Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: begins.Format(time.DateOnly), PeriodStart: begins, Amount: 1999, Currency: "EUR", Gateway: b.gateway.Name(),
			Token: currentCard}}, b.clock.Now())
		if err != nil {
			return err
		}
		return dropJobs(ctx, tx, created)
	}))
	require.Len(t, created, 1)
	if status == charges.Declined {
		_, err := b.pool.Exec(ctx, `UPDATE charges SET status = $2, next_attempt_at = $3 WHERE id = $1`,
			created[0].ID, string(status), b.clock.Now().Add(time.Hour))
		require.NoError(t, err)
	}
	return b.get(ctx, t, created[0].ID)
}

// The owner says when its dunning ended; the engine, not the owner, stops
// its other charges: those of periods that began since are voided (not
// owed), older declined ones fail, older waiting ones are left.
func TestFailedAppliesTheOwnersDunningEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	end := periodStart.AddDate(0, 1, 0)
	failed := b.newCharge(ctx, t, fixture{status: charges.Failed})
	olderDeclined := b.period(ctx, t, periodStart.AddDate(0, -1, 0), charges.Declined)
	olderWaiting := b.period(ctx, t, periodStart.AddDate(0, -2, 0), charges.Scheduled)
	notOwed := b.period(ctx, t, end, charges.Scheduled)
	notOwedDeclined := b.period(ctx, t, end.AddDate(0, 1, 0), charges.Declined)

	report := func(owner *answeringOwner) {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return b.pipeline.Store.Failed(ctx, tx, owner, failed, b.clock.Now())
		}))
	}
	report(&answeringOwner{}) // no answer: nothing else moves
	for _, c := range []charges.Charge{olderDeclined, olderWaiting, notOwed, notOwedDeclined} {
		require.Equal(t, c.Status, b.get(ctx, t, c.ID).Status)
	}

	report(&answeringOwner{dunningEnded: &end})
	require.Equal(t, charges.Failed, b.get(ctx, t, olderDeclined.ID).Status)
	require.Equal(t, charges.Scheduled, b.get(ctx, t, olderWaiting.ID).Status)
	for _, c := range []charges.Charge{notOwed, notOwedDeclined} {
		got := b.get(ctx, t, c.ID)
		require.Equal(t, charges.Voided, got.Status)
		require.Equal(t, "subscription_unpaid", got.FailureCode)
		b.requireEvents(ctx, t, c.ID, charges.Voided)
	}
	b.requireEvents(ctx, t, olderDeclined.ID, charges.Failed)
}

// A paid charge's owner hears whether it owes more (another charge
// declined, or failed and not settled by a person), and the engine voids
// the charges of periods its answer says are not owed.
func TestPaidTellsWhetherMoreIsOwedAndAppliesTheAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	paid := b.newCharge(ctx, t, fixture{status: charges.Succeeded})
	since := periodStart.AddDate(0, 1, 0)
	notOwed := b.period(ctx, t, since, charges.Scheduled)

	owner := &answeringOwner{}
	tell := func() {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return b.pipeline.Store.Paid(ctx, tx, owner, paid, b.clock.Now())
		}))
	}
	tell()
	older := b.period(ctx, t, periodStart.AddDate(0, -1, 0), charges.Declined)
	tell()
	require.Equal(t, []bool{false, true}, owner.owesMore)
	require.Equal(t, charges.Scheduled, b.get(ctx, t, notOwed.ID).Status)

	owner.notOwedSince = &since
	tell()
	require.Equal(t, charges.Voided, b.get(ctx, t, notOwed.ID).Status)
	require.Equal(t, charges.Declined, b.get(ctx, t, older.ID).Status, "a period before the dunning's end is owed")
}
