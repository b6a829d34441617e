package subscriptions_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

func ptr[T any](v T) *T { return &v }

// nothingPaid answers for charges in these tests: no charge holds
// anything.
func nothingPaid(context.Context, pgx.Tx, uuid.UUID, string) (int64, bool, error) {
	return 0, false, nil
}

func (b testBundle) update(t *testing.T, id uuid.UUID, u subscriptions.Update, pr subscriptions.Proration) (subscriptions.Subscription, subscriptions.Change, error) {
	t.Helper()
	var (
		sub subscriptions.Subscription
		ch  subscriptions.Change
	)
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		sub, ch, err = b.store.Update(context.Background(), tx, id, u, pr, actor, nothingPaid)
		return err
	})
	return sub, ch, err
}

func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var errs rebilltype.Errors
	require.ErrorAs(t, err, &errs)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	return fields
}

func TestUpdateValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	for _, tc := range []struct {
		name   string
		u      subscriptions.Update
		pr     subscriptions.Proration
		fields []string
	}{
		{"another currency", subscriptions.Update{Currency: "USD", Amount: ptr(int64(100))}, subscriptions.ProrationNone, []string{"currency"}},
		{"amount out of range", subscriptions.Update{Amount: ptr(int64(0))}, subscriptions.ProrationNone, []string{"amount"}},
		{"interval", subscriptions.Update{Interval: ptr(period.Interval("fortnight")), IntervalCount: ptr(0)}, subscriptions.ProrationNone,
			[]string{"interval", "interval_count"}},
		{"effective", subscriptions.Update{Amount: ptr(int64(100)), Effective: "tomorrow"}, subscriptions.ProrationNone, []string{"effective"}},
		{"proration", subscriptions.Update{Amount: ptr(int64(100))}, "cheapest", []string{"proration"}},
		{"nothing changes", subscriptions.Update{Amount: ptr(int64(49900)), Currency: "RUB", Metadata: map[string]string{}}, subscriptions.ProrationNone, []string{""}},
		{"receipt that does not add up", subscriptions.Update{Amount: ptr(int64(100)), Receipt: &subscriptions.Receipt{
			Customer: subscriptions.ReceiptCustomer{Email: "a@example.com"},
			Items:    []subscriptions.ReceiptItem{{Description: "Plan", Quantity: "1", Amount: 99, VATCode: 1}}}},
			subscriptions.ProrationNone, []string{"receipt.items"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := b.update(t, sub.ID, tc.u, tc.pr)
			require.Equal(t, tc.fields, fieldsOf(t, err))
		})
	}
	got, err := b.store.Get(context.Background(), b.pool, sub.ID)
	require.NoError(t, err)
	require.Equal(t, sub.Amount, got.Amount, "no refused update changed anything")
}

// An amount change of a subscription whose payments carry a receipt
// carries its new receipt.
func TestAmountChangeNeedsANewReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	receipt := func(amount int64) *subscriptions.Receipt {
		return &subscriptions.Receipt{Customer: subscriptions.ReceiptCustomer{Email: "a@example.com"},
			Items: []subscriptions.ReceiptItem{{Description: "Plan", Quantity: "2", Amount: amount / 2, VATCode: 1}}}
	}
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(context.Background(), tx, subscriptions.New{CustomerID: "cust-1", Amount: 1000, Currency: "RUB",
			Interval: period.Month, IntervalCount: 1, TimeZone: "Europe/Moscow", Receipt: receipt(1000),
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok", ExpMonth: 12, ExpYear: 2030}}, actor, nil)
		return err
	})
	_, _, err := b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(2000))}, subscriptions.ProrationNone)
	require.Equal(t, []string{"receipt"}, fieldsOf(t, err))
	got, _, err := b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(2000)), Receipt: receipt(2000)}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, int64(1000), got.Receipt.Items[0].Amount)
	require.Equal(t, subscriptions.Receipt{Customer: got.Receipt.Customer,
		Items: []subscriptions.ReceiptItem{{Description: "Plan", Quantity: "1", Amount: 77, VATCode: 1}}}, got.Receipt.Repriced(77))
}

// A cancelled subscription's terms do not change; an interval change now
// would move a scheduled cancel's period end.
func TestUpdateRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.Cancel(context.Background(), tx, sub.ID, true, actor)
		return err
	})
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `UPDATE subscriptions SET next_period_index = 1, next_charge_at = $2 WHERE id = $1`,
			sub.ID, sub.Schedule().Start(1))
		return err
	})
	var te *fsm.TransitionError
	_, _, err := b.update(t, sub.ID, subscriptions.Update{Interval: ptr(period.Week)}, subscriptions.ProrationNone)
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Reason, "cancel is scheduled")
	_, _, err = b.update(t, sub.ID, subscriptions.Update{Interval: ptr(period.Week), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)

	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.Cancel(context.Background(), tx, sub.ID, false, actor)
		return err
	})
	_, _, err = b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(100))}, subscriptions.ProrationNone)
	require.ErrorAs(t, err, &te)
	require.Equal(t, "cancelled", te.From)
}

// During a trial an update applies at once and is not prorated (nothing
// was charged): it changes the first charge. One at period end waits for
// the trial's end, where the first period begins.
func TestUpdateDuringATrial(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	trialEnd := b.clock.Now().Add(14 * 24 * time.Hour)
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `UPDATE subscriptions SET status = $2, trial_end = $3, billing_anchor = $3,
			next_charge_at = $3 WHERE id = $1`, sub.ID, subscriptions.Trialing, trialEnd)
		return err
	})
	got, ch, err := b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(100)), Interval: ptr(period.Year)}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, subscriptions.ProrationNone, ch.Proration)
	require.False(t, ch.Restarted)
	require.Equal(t, int64(100), got.Amount)
	require.Equal(t, trialEnd, got.BillingAnchor, "the first period still begins at the trial's end")
	require.Equal(t, subscriptions.Trialing, got.Status)

	got, _, err = b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(200)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, trialEnd, got.PendingUpdate.EffectiveAt)
	k, ok := got.BoundaryIndex()
	require.True(t, ok)
	require.Zero(t, k, "the first period")
	require.Equal(t, []string{"created", "updated", "update_scheduled"}, b.events(t, sub))
}

// A pending update that clears the metadata clears it when it applies; one
// that leaves it out keeps it.
func TestPendingUpdateClearsMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	_, _, err := b.update(t, sub.ID, subscriptions.Update{Metadata: map[string]string{"plan": "pro"}}, subscriptions.ProrationNone)
	require.NoError(t, err)
	got, _, err := b.update(t, sub.ID, subscriptions.Update{Metadata: map[string]string{}, Effective: subscriptions.EffectivePeriodEnd},
		subscriptions.ProrationNone)
	require.NoError(t, err)
	require.NotNil(t, got.PendingUpdate.Metadata)
	b.inTx(t, func(tx pgx.Tx) error {
		got, err = b.store.ApplyPending(context.Background(), tx, got, 1)
		return err
	})
	require.Empty(t, got.Metadata)
	require.Nil(t, got.PendingUpdate)
	require.Equal(t, 1, got.NextPeriodIndex)

	_, _, err = b.update(t, sub.ID, subscriptions.Update{Metadata: map[string]string{"plan": "max"}}, subscriptions.ProrationNone)
	require.NoError(t, err)
	got, _, err = b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(100)), Effective: subscriptions.EffectivePeriodEnd}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Nil(t, got.PendingUpdate.Metadata)
	b.inTx(t, func(tx pgx.Tx) error {
		got, err = b.store.ApplyPending(context.Background(), tx, got, 2)
		return err
	})
	require.Equal(t, map[string]string{"plan": "max"}, got.Metadata)
}

// A paused subscription takes a change that prorates nothing whatever the
// proration (a customer key's default included), and refuses a prorated
// one.
func TestPausedSubscriptionRefusesOnlyAProratedChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.Pause(context.Background(), tx, sub.ID, nil, "", actor)
		return err
	})
	got, _, err := b.update(t, sub.ID, subscriptions.Update{Description: ptr("gold plan")}, subscriptions.ProrationChargeNow)
	require.NoError(t, err)
	require.Equal(t, "gold plan", got.Description)
	_, _, err = b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(100))}, subscriptions.ProrationChargeNow)
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Reason, "proration none")
	got, _, err = b.update(t, sub.ID, subscriptions.Update{Amount: ptr(int64(100))}, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, int64(100), got.Amount)
}

// A change made under an id its request derived keeps that id (which its
// adjustment charge's key and a restarted schedule's period keys carry):
// the request run again after a restore forgot it makes the same change.
// The id taken already (the request's key made the change, and its stored
// response has expired since) is ErrChangedBefore.
func TestUpdateUnderAGivenChangeID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.create(t)
	changeID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("client\x00key\x00subscription_change"))
	u := subscriptions.Update{Interval: ptr(period.Year), ChangeID: changeID}
	got, ch, err := b.update(t, sub.ID, u, subscriptions.ProrationNone)
	require.NoError(t, err)
	require.Equal(t, changeID, ch.ID)
	require.Equal(t, period.Year, got.Interval)

	_, _, err = b.update(t, sub.ID, subscriptions.Update{Interval: ptr(period.Month), ChangeID: changeID}, subscriptions.ProrationNone)
	require.ErrorIs(t, err, subscriptions.ErrChangedBefore)
}
