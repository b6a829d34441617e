package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// quittance answers that the registry holds payments.
func quittance(payments ...registry.QuittancePayment) func(context.Context, string) (registry.Quittance, error) {
	return func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Payments: payments}, nil
	}
}

// Just before a hold is posted the registry is asked again, afresh: a fine
// paid at a bank since the attempt was priced is not posted, its hold is
// released and its next attempt asks again; rebill's own payments and
// annulled ones do not count.
func TestHoldIsNotPostedWhenMoreWasPaidElsewhere(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		payments []registry.QuittancePayment
		posted   bool
	}{
		"nothing paid elsewhere": {posted: true},
		"only rebill's own payment, replayed": {payments: []registry.QuittancePayment{{PaymentID: "own", Amount: 500}},
			posted: true},
		"an annulled payment elsewhere": {payments: []registry.QuittancePayment{{PaymentID: "bank-1", Amount: 200, Annulled: true}},
			posted: true},
		"paid in part at a bank": {payments: []registry.QuittancePayment{{PaymentID: "bank-1", Amount: 200}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupTooLate(ctx, t)
			payments := tc.payments
			for i := range payments {
				if payments[i].PaymentID == "own" {
					payments[i].PaymentID = b.id
				}
			}
			b.gw.QuittanceFunc = quittance(payments...)
			b.gw.PostFunc = func(context.Context, registry.Payment) error { return nil }
			b.gw.LookupFunc = registrytest.LooksUp(false, false, nil)
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = b.worker.Work(ctx, t, tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			if tc.posted {
				require.Len(t, b.gw.CallsOf("post"), 1)
				require.Equal(t, charges.PostingAccepted, b.status(ctx, t))
				return
			}
			require.Empty(t, b.gw.CallsOf("post"), "the registry never hears of a hold paid elsewhere meanwhile")
			require.Equal(t, charges.PostingCancelled, b.status(ctx, t))
			var recheck bool
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT outside_recheck FROM charges WHERE id = $1`, b.charge.ID).Scan(&recheck))
			require.True(t, recheck, "the next attempt is due at once and asks again")
			rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, riverpgxv5.New(b.pool),
				charges.VoidArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)
		})
	}
}

// What was paid outside rebill is what the registry holds that stands,
// less every payment id rebill used; while one of rebill's postings of the
// UIN stands accepted the registry is not asked (it would count money
// rebill may still capture); an answer is reused for at most five minutes.
func TestPaidOutside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	clk := testsupport.NewClock(postingStart)
	poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer([]registry.Gateway{b.gw}, time.Second), Clock: clk,
		Logger: zerolog.Nop()}
	asked := 0
	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		asked++
		return registry.Quittance{Payments: []registry.QuittancePayment{{PaymentID: b.id, Amount: 500},
			{PaymentID: "bank-1", Amount: 150}, {PaymentID: "kiosk-2", Amount: 100, Annulled: true}}}, nil
	}
	paid, err := poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, charges.OutsidePaid{Amount: 150}, paid, "rebill's own payment and the annulled one are left out")

	_, err = poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, 1, asked, "the answer is reused within five minutes")
	clk.Advance(charges.QuittanceMaxAge)
	_, err = poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, 2, asked, "and asked again after them")

	_, err = b.pool.Exec(ctx, `UPDATE registry_postings SET status = 'accepted' WHERE payment_id = $1`, b.id)
	require.NoError(t, err)
	clk.Advance(charges.QuittanceMaxAge)
	b.charge.PaidOutside = 40
	paid, err = poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, 2, asked, "not asked while rebill's own posting stands")
	require.Equal(t, charges.OutsidePaid{Amount: 40}, paid, "what the charge last recorded stands")
}

// A registry that cannot say, just before a posting, what was paid
// elsewhere delays the posting: nothing is posted blind, and the posting
// waits rather than failing.
func TestPostingWaitsForTheRegistryToAnswerAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{}, registry.ErrUnavailable
	}
	b.clk.Set(postingStart.Add(time.Hour))
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err := b.worker.Work(ctx, t, tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.Empty(t, b.gw.CallsOf("post"), "nothing is posted without the answer")
	require.Equal(t, charges.PostingPosting, b.status(ctx, t), "the posting waits, not failed")
}

// The registry's settled verdict counts rebill's own payments too: while
// one of them stands there (an earlier attempt whose answer was lost),
// the verdict is not taken for a payment made elsewhere.
func TestSettledVerdictWithOwnPaymentStandingIsNotTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer([]registry.Gateway{b.gw}, time.Second), Clock: b.clk,
		Logger: zerolog.Nop()}
	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Settled: true, Payments: []registry.QuittancePayment{{PaymentID: b.id, Amount: 500}}}, nil
	}
	paid, err := poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, charges.OutsidePaid{}, paid, "settled by rebill's own payment: nothing paid elsewhere")

	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Settled: true, Payments: []registry.QuittancePayment{{PaymentID: b.id, Amount: 500, Annulled: true},
			{PaymentID: "bank-1", Amount: 500}}}, nil
	}
	b.clk.Advance(charges.QuittanceMaxAge)
	paid, err = poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, charges.OutsidePaid{Amount: 500, Settled: true}, paid, "rebill's annulled, the bank's stands: settled elsewhere")
}

// A fine whose bill source reports more paid than the registry last
// answered is asked about afresh, not from the cache: the source may have
// seen a payment the cached answer predates.
func TestPaidOutsideAsksAfreshWhenTheSourceReportsMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer([]registry.Gateway{b.gw}, time.Second), Clock: b.clk,
		Logger: zerolog.Nop()}
	paidAtBank := int64(0)
	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Payments: []registry.QuittancePayment{{PaymentID: "bank-1", Amount: paidAtBank}}}, nil
	}
	paid, err := poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, int64(0), paid.Amount)

	paidAtBank = 300
	c := b.charge
	c.SourcePaid = 300
	paid, err = poster.PaidOutside(ctx, c)
	require.NoError(t, err)
	require.Equal(t, int64(300), paid.Amount, "asked afresh within the cache's five minutes")

	paidAtBank = 400
	c.SourcePaid, c.PaidOutside = 300, 300
	paid, err = poster.PaidOutside(ctx, c)
	require.NoError(t, err)
	require.Equal(t, int64(300), paid.Amount, "a source figure the registry's answer covers asks nothing afresh")
}

// Rebill's own posting of a fine may stand at the registry while it is
// being posted or accepted; failed, cancelled or annulled, it cannot.
func TestOwnPaymentMayStand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	poster := &charges.Poster{Pool: b.pool, Clock: b.clk, Logger: zerolog.Nop()}
	for _, tc := range []struct {
		status charges.PostingStatus
		stands bool
	}{
		{charges.PostingPosting, true}, {charges.PostingAccepted, true},
		{charges.PostingFailed, false}, {charges.PostingCancelled, false}, {charges.PostingAnnulled, false},
	} {
		_, err := b.pool.Exec(ctx, `UPDATE registry_postings SET status = $2 WHERE payment_id = $1`, b.id, string(tc.status))
		require.NoError(t, err)
		stands, err := poster.OwnPaymentMayStand(ctx, b.pool, b.charge.RegistryUIN)
		require.NoError(t, err)
		require.Equal(t, tc.stands, stands, string(tc.status))
	}
	stands, err := poster.OwnPaymentMayStand(ctx, b.pool, "18810000000000000000")
	require.NoError(t, err)
	require.False(t, stands, "another UIN")
}

// A payment the registry holds under the identifier the charge's attempt
// posts under is rebill's own although no posting names it: a restore
// (or a failover's lost commits) forgot the posting the registry kept.
// It is not paid elsewhere, nor does it settle the fine: the attempt held
// again posts under that identifier, the registry replays it, and the
// fine is captured, not left paid_elsewhere with the payment accepted and
// no money behind it.
func TestPaidOutsideKnowsTheAttemptsOwnPaymentAPostingRowForgot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTooLate(ctx, t)
	_, err := b.pool.Exec(ctx, `DELETE FROM registry_postings WHERE payment_id = $1`, b.id)
	require.NoError(t, err)
	poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer([]registry.Gateway{b.gw}, time.Second), Clock: b.clk,
		Logger: zerolog.Nop()}
	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Settled: true, Payments: []registry.QuittancePayment{{PaymentID: b.id, Amount: 500}}}, nil
	}
	paid, err := poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, charges.OutsidePaid{}, paid, "the attempt's own payment, forgotten by the database: nothing paid elsewhere")

	b.gw.QuittanceFunc = func(context.Context, string) (registry.Quittance, error) {
		return registry.Quittance{Settled: true, Payments: []registry.QuittancePayment{{PaymentID: b.id, Amount: 500},
			{PaymentID: "bank-1", Amount: 200}}}, nil
	}
	b.clk.Advance(charges.QuittanceMaxAge)
	paid, err = poster.PaidOutside(ctx, b.charge)
	require.NoError(t, err)
	require.Equal(t, charges.OutsidePaid{Amount: 200}, paid, "a bank's payment still counts")
}
