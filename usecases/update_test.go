package usecases_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/usecases"
)

func (s *scenario) update(caller usecases.Caller, id uuid.UUID, u subscriptions.Update) (subscriptions.Subscription, error) {
	s.t.Helper()
	var sub subscriptions.Subscription
	err := s.inTx(func(tx pgx.Tx) (err error) {
		sub, err = s.w.svc.UpdateSubscription(s.ctx, tx, caller, id, u)
		return err
	})
	return sub, err
}

// adjustment is the subscription's one adjustment charge.
func (s *scenario) adjustment(id uuid.UUID) charges.Charge {
	s.t.Helper()
	var found []charges.Charge
	for _, c := range s.charges(id) {
		if len(c.PeriodKey) > len("2006-01-02") {
			found = append(found, c)
		}
	}
	require.Len(s.t, found, 1)
	return found[0]
}

func amount(n int64) *int64 { return &n }

// A declined adjustment charge is dunned like any charge: the
// subscription becomes past due, the retry pays it, and it is active
// again; the gateway's ledger shows one capture per charge.
func TestDeclinedAdjustmentIsDunnedLikeAnyCharge(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Month, "tok_1")
	s.pay()
	s.advance(14 * 24 * time.Hour) // Jan 30 .. Feb 28 is 29 days: 15 left
	_, err := s.update(staff, id, subscriptions.Update{Amount: amount(3000), Proration: subscriptions.ProrationChargeNow})
	require.NoError(t, err)
	adj := s.adjustment(id)
	require.Equal(t, int64(1034), adj.Amount, "2000 * 15/29 = 1034.48")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictSoftDecline})
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
	require.Equal(t, charges.Declined, s.adjustment(id).Status)

	s.advance(24 * time.Hour)
	s.scan()
	s.pay()
	require.Equal(t, charges.Succeeded, s.adjustment(id).Status)
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
	v := s.w.gw.view()
	require.Empty(t, v.check())
	require.Len(t, v.captures(), 2)
}

// An adjustment hard-declined makes the subscription unpaid like the
// period's charge would; a new card retries it (it belongs to a period
// that began before the dunning ended), and paying it reactivates.
func TestAdjustmentOfAnUnpaidSubscriptionIsRetriedWithTheNewCard(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Month, "tok_1")
	s.pay()
	s.advance(24 * time.Hour)
	_, err := s.update(staff, id, subscriptions.Update{Amount: amount(2000), Proration: subscriptions.ProrationChargeNow})
	require.NoError(t, err)
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictHardDecline})
	require.Equal(t, subscriptions.Unpaid, s.sub(id).Status)
	require.Equal(t, charges.Failed, s.adjustment(id).Status)

	_, err = s.update(staff, id, subscriptions.Update{Amount: amount(500), Proration: subscriptions.ProrationCreditNext})
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te, "an unpaid subscription is not prorated")
	require.Contains(t, err.Error(), "proration none")

	require.NoError(t, s.inTx(func(tx pgx.Tx) error {
		_, err := s.w.svc.ChangePaymentMethod(s.ctx, tx, staff, id, card("tok_2"))
		return err
	}))
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
	require.Equal(t, charges.Scheduled, s.adjustment(id).Status, "retried with the new card")
	s.pay()
	require.Equal(t, charges.Succeeded, s.adjustment(id).Status)
	require.Equal(t, subscriptions.Active, s.sub(id).Status)
}

// A past-due subscription may change: a downgrade is measured against
// what was captured, nothing for a declined period; an upgrade's
// adjustment is charged like any charge.
func TestUpdateWhilePastDue(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Month, "tok_1")
	s.run(charges.AuthorizeArgs{}.Kind(), answers{verdict: verdictSoftDecline})
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
	s.advance(2 * time.Hour)
	sub, err := s.update(staff, id, subscriptions.Update{Amount: amount(400), Proration: subscriptions.ProrationCreditNext})
	require.NoError(t, err)
	require.Zero(t, sub.CreditBalance, "nothing was captured, nothing is given back")
	_, err = s.update(staff, id, subscriptions.Update{Amount: amount(4000), Proration: subscriptions.ProrationChargeNow})
	require.NoError(t, err)
	require.Equal(t, charges.Scheduled, s.adjustment(id).Status)
	require.Equal(t, subscriptions.PastDue, s.sub(id).Status)
}

// Customer keys: their own subscriptions only; the proration is the
// configured default, and naming another is 400 naming proration.
func TestCustomerKeysGetTheConfiguredProration(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.w.svc.CustomerProration = subscriptions.ProrationCreditNext
	id := s.create(period.Month, "tok_1")
	s.pay()
	s.advance(24 * time.Hour)
	customer := usecases.Caller{Actor: subscriptions.Actor{ID: "ck", Role: "customer"}, CustomerID: "cust"}
	stranger := usecases.Caller{Actor: subscriptions.Actor{ID: "sk", Role: "customer"}, CustomerID: "other"}

	_, err := s.update(stranger, id, subscriptions.Update{Amount: amount(3000)})
	require.ErrorIs(t, err, subscriptions.ErrNotFound)
	_, err = s.update(customer, id, subscriptions.Update{Amount: amount(3000), Proration: subscriptions.ProrationChargeNow})
	var fields rebilltype.Errors
	require.ErrorAs(t, err, &fields)
	require.Equal(t, "proration", fields[0].Field)
	require.Equal(t, 1000, int(s.sub(id).Amount))

	sub, err := s.update(customer, id, subscriptions.Update{Amount: amount(3000)})
	require.NoError(t, err, "an upgrade under credit_next charges nothing now")
	require.Equal(t, int64(3000), sub.Amount)
	require.Len(t, s.charges(id), 1)
	sub, err = s.update(customer, id, subscriptions.Update{Amount: amount(100), Proration: subscriptions.ProrationCreditNext})
	require.NoError(t, err, "the default may be named")
	require.Positive(t, sub.CreditBalance)

	_, err = s.update(staff, id, subscriptions.Update{Currency: "USD"})
	require.ErrorAs(t, err, &fields)
	require.Equal(t, "currency", fields[0].Field)
}

// RemovePendingUpdate: visible subscriptions only, idempotent.
func TestRemovePendingUpdate(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	id := s.create(period.Month, "tok_1")
	sub, err := s.update(staff, id, subscriptions.Update{Amount: amount(3000), Effective: subscriptions.EffectivePeriodEnd})
	require.NoError(t, err)
	require.NotNil(t, sub.PendingUpdate)
	stranger := usecases.Caller{Actor: subscriptions.Actor{ID: "sk", Role: "customer"}, CustomerID: "other"}
	for _, caller := range []usecases.Caller{stranger, staff, staff} {
		err := s.inTx(func(tx pgx.Tx) error {
			sub, err = s.w.svc.RemovePendingUpdate(s.ctx, tx, caller, id)
			return err
		})
		if caller.CustomerID != "" {
			require.ErrorIs(t, err, subscriptions.ErrNotFound)
			continue
		}
		require.NoError(t, err)
		require.Nil(t, sub.PendingUpdate)
	}
	events, err := s.w.svc.Events(s.ctx, staff, id, 0, 100)
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"created", "update_scheduled", "update_removed"}, types)
}
