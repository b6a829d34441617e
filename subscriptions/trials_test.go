package subscriptions_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

func trialNew(mod func(n *subscriptions.New)) subscriptions.New {
	n := subscriptions.New{CustomerID: "cust-1", Amount: 49900, Currency: "RUB", Interval: period.Month, IntervalCount: 1,
		TimeZone:      "Europe/Moscow",
		PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok_1", Last4: "4242", ExpMonth: 12, ExpYear: 2030}}
	mod(&n)
	return n
}

// A trial is trial_end or trial_period_days, never both and never with
// billing_anchor, which the trial sets; each refusal names its fields.
func TestTrialValidation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	known := func(string) bool { return true }
	for _, tc := range []struct {
		name   string
		mod    func(n *subscriptions.New)
		fields []string // nil: valid
	}{
		{"trial_end ahead", func(n *subscriptions.New) { n.TrialEnd = ptr(now.Add(time.Second)) }, nil},
		{"trial_period_days 1", func(n *subscriptions.New) { n.TrialPeriodDays = ptr(1) }, nil},
		{"trial_period_days 730", func(n *subscriptions.New) { n.TrialPeriodDays = ptr(730) }, nil},
		{"trial_end 10 years ahead", func(n *subscriptions.New) { n.TrialEnd = ptr(now.AddDate(10, 0, 0)) }, nil},
		{"trial_end now", func(n *subscriptions.New) { n.TrialEnd = ptr(now) }, []string{"trial_end"}},
		{"trial_end past", func(n *subscriptions.New) { n.TrialEnd = ptr(now.Add(-time.Hour)) }, []string{"trial_end"}},
		{"trial_end beyond the horizon", func(n *subscriptions.New) { n.TrialEnd = ptr(now.AddDate(10, 0, 0).Add(time.Second)) },
			[]string{"trial_end"}},
		{"trial_period_days 0", func(n *subscriptions.New) { n.TrialPeriodDays = ptr(0) }, []string{"trial_period_days"}},
		{"trial_period_days 731", func(n *subscriptions.New) { n.TrialPeriodDays = ptr(731) }, []string{"trial_period_days"}},
		{"trial_period_days negative", func(n *subscriptions.New) { n.TrialPeriodDays = ptr(-3) }, []string{"trial_period_days"}},
		{"both", func(n *subscriptions.New) { n.TrialEnd, n.TrialPeriodDays = ptr(now.Add(time.Hour)), ptr(7) },
			[]string{"trial_end", "trial_period_days"}},
		{"trial_end with billing_anchor", func(n *subscriptions.New) {
			n.TrialEnd, n.BillingAnchor = ptr(now.Add(time.Hour)), ptr(now.Add(2*time.Hour))
		}, []string{"billing_anchor"}},
		{"trial_period_days with billing_anchor", func(n *subscriptions.New) {
			n.TrialPeriodDays, n.BillingAnchor = ptr(7), ptr(now.Add(2*time.Hour))
		}, []string{"billing_anchor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := trialNew(tc.mod).Validate(now, known)
			if tc.fields == nil {
				require.NoError(t, err)
				return
			}
			var errs rebilltype.Errors
			require.True(t, errors.As(err, &errs), "%v", err)
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			sort.Strings(fields)
			require.Equal(t, tc.fields, fields)
		})
	}
}

// trial_period_days counts calendar days in the subscription's zone: a
// trial across the end of daylight saving time ends at the same local
// time, 25 hours after a day's 24.
func TestTrialPeriodDaysAreCalendarDays(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 31, 10, 0, 0, 0, time.UTC) // 06:00 in New York, EDT
	n := trialNew(func(n *subscriptions.New) { n.TimeZone, n.TrialPeriodDays = "America/New_York", ptr(2) })
	end := n.TrialEndAt(now)
	require.Equal(t, time.Date(2026, 11, 2, 11, 0, 0, 0, time.UTC), *end, "06:00 EST, two days on")
	require.Nil(t, trialNew(func(*subscriptions.New) {}).TrialEndAt(now))
}

func (b testBundle) createTrial(t *testing.T, days int) subscriptions.Subscription {
	t.Helper()
	var sub subscriptions.Subscription
	b.inTx(t, func(tx pgx.Tx) (err error) {
		sub, err = b.store.Create(context.Background(), tx, trialNew(func(n *subscriptions.New) { n.TrialPeriodDays = &days }), actor, nil)
		return err
	})
	return sub
}

// A trial is created trialing, anchored at its end; pausing it and
// resuming it are refused and write nothing; ending it twice writes one
// event and moves the anchor to the end.
func TestTrialTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.createTrial(t, 14)
	end := b.clock.Now().AddDate(0, 0, 14)
	require.Equal(t, subscriptions.Trialing, sub.Status)
	require.Equal(t, end, *sub.TrialEnd)
	require.Equal(t, end, sub.BillingAnchor)
	require.Equal(t, end, sub.NextChargeAt)

	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.store.Pause(ctx, tx, sub.ID, nil, "", actor)
		return err
	})
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "a trial charges nothing; cancel it or end it", te.Reason)
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.store.Resume(ctx, tx, sub.ID, actor)
		return err
	})
	require.ErrorAs(t, err, &te)

	b.clock.Advance(24 * time.Hour)
	endedAt := b.clock.Now()
	for i := range 2 {
		b.inTx(t, func(tx pgx.Tx) error {
			got, changed, err := b.store.EndTrial(ctx, tx, sub.ID, endedAt, actor)
			require.Equal(t, i == 0, changed)
			require.Equal(t, subscriptions.Active, got.Status)
			require.Equal(t, endedAt, got.BillingAnchor)
			require.Equal(t, endedAt, *got.TrialEnd, "the trial ended early")
			require.Equal(t, endedAt, got.NextChargeAt)
			return err
		})
	}
	require.Equal(t, []string{"created", "trial_ended"}, b.events(t, sub))
	events, err := b.store.Events(ctx, b.pool, sub.ID, 0, 10)
	require.NoError(t, err)
	require.Equal(t, subscriptions.Trialing, events[0].To, "created trialing")
	require.Equal(t, subscriptions.Trialing, events[1].From)

	// Only a trial ends: a cancelled subscription is refused.
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.Cancel(ctx, tx, sub.ID, false, actor)
		return err
	})
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.store.EndTrial(ctx, tx, sub.ID, b.clock.Now(), actor)
		return err
	})
	require.ErrorAs(t, err, &te)
}

// A cancel at period end during a trial is scheduled at the trial's end,
// and the trial can then no longer be ended early: that would charge a
// subscription set to be cancelled.
func TestCancelAtPeriodEndDuringTrial(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub := b.createTrial(t, 7)
	b.inTx(t, func(tx pgx.Tx) error {
		got, changed, err := b.store.Cancel(ctx, tx, sub.ID, true, actor)
		require.True(t, changed)
		require.Equal(t, subscriptions.Trialing, got.Status)
		require.True(t, got.CancelAtPeriodEnd)
		return err
	})
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.store.EndTrial(ctx, tx, sub.ID, b.clock.Now(), actor)
		return err
	})
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, []string{"created", "cancel_scheduled"}, b.events(t, sub))
}
