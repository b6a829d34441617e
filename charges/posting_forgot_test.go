package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/charges/registry"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
)

// forgottenFine is a fine (500 at the discount) on the pipeline with the
// real poster over the simulated registry (its own book): its first
// attempt was held and posted, the registry accepted the payment, and
// then a restore forgot the posting while the charge went on to its
// second attempt (the first hold lapsed, voided).
type forgottenFine struct {
	*testBundle
	sim       *registrysim.Sim
	charge    charges.Charge
	first     string // the first attempt's payment id, accepted at the registry
	authorize *rivertest.Worker[charges.AuthorizeArgs, pgx.Tx]
	post      *rivertest.Worker[charges.PostArgs, pgx.Tx]
	sweep     *rivertest.Worker[charges.SweepArgs, pgx.Tx]
	annul     *rivertest.Worker[charges.AnnulArgs, pgx.Tx]
	capture   *rivertest.Worker[charges.CaptureArgs, pgx.Tx]
}

func setupForgottenFine(ctx context.Context, t *testing.T) *forgottenFine {
	t.Helper()
	b := setup(t)
	b.withHoldLifetime()
	b.pipeline.UnavailableFor = 2 * holdLifetime
	b.pipeline.Owners.Enrollments = &fakeEnrollments{}
	sim := &registrysim.Sim{Pool: b.pool, Clock: b.clock, Names: []string{"gmp1"}}
	poster := &charges.Poster{Pool: b.pool, Gateways: registry.NewBalancer(sim.Gateways(), time.Second), Clock: b.clock,
		Charges: b.pipeline.Store, Holds: b.pipeline.Gateways, GiveUpAfter: giveUpAfter,
		Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: b.clock.Now}, Logger: zerolog.Nop()}
	b.pipeline.Postings, b.pipeline.Outside = poster, poster
	charges.RegisterPoster(b.config.Workers, poster)
	f := &forgottenFine{testBundle: b, sim: sim,
		authorize: newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline}),
		post:      newWorker(t, b, &charges.PostWorker{Poster: poster}),
		sweep:     newWorker(t, b, &charges.SweepWorker{Poster: poster}),
		annul:     newWorker(t, b, &charges.AnnulWorker{Poster: poster}),
		capture:   newWorker(t, b, &charges.CaptureWorker{Pipeline: b.pipeline}),
	}
	f.charge = newFineCharge(ctx, t, b, start.Add(30*24*time.Hour))
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	_, err := f.authorize.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: f.charge.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1 AND attempt = 1`,
		f.charge.ID).Scan(&f.first))
	_, err = f.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: f.first}, nil)
	require.NoError(t, err)
	f.requireBook(ctx, t, map[string]string{f.first: "accepted"})

	_, err = b.pool.Exec(ctx, `DELETE FROM registry_postings WHERE charge_id = $1`, f.charge.ID)
	require.NoError(t, err)
	b.clock.Advance(holdLifetime - charges.HoldExpiryMargin)
	b.gateway.VoidFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "void_1"}, nil)
	void := newWorker(t, b, &charges.VoidWorker{Pipeline: b.pipeline})
	_, err = void.Work(ctx, t, b.tx, charges.VoidArgs{ChargeID: f.charge.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		retried, err := b.pipeline.Store.DueRetries(ctx, tx, b.clock.Now(), 10)
		require.Len(t, retried, 1)
		return err
	}))
	return f
}

// requireBook asserts the registry's book of the fine: status by payment
// id, every entry.
func (f *forgottenFine) requireBook(ctx context.Context, t *testing.T, want map[string]string) {
	t.Helper()
	book, err := f.sim.Ledger(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range book {
		got[e.PaymentID] = e.Status
	}
	require.Equal(t, want, got)
}

// settleSecondAttempt drives the fine's second attempt as the jobs would:
// its authorize, held back while the registry holds the first attempt's
// payment; the sweep and the annulment; the authorize again, the posting
// and the capture. It returns the second attempt's payment id.
func (f *forgottenFine) settleSecondAttempt(ctx context.Context, t *testing.T) string {
	t.Helper()
	id := f.charge.ID
	res, err := f.authorize.Work(ctx, t, f.tx, charges.AuthorizeArgs{ChargeID: id, Attempt: 2}, nil)
	require.NoError(t, err)
	waiting := f.get(ctx, t, id)
	require.Equal(t, charges.Scheduled, waiting.Status, "not paid_elsewhere: the first attempt's payment is rebill's own")
	require.NotEqual(t, charges.FailurePaidElsewhere, waiting.FailureCode)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "no second hold while the first attempt's payment stands")
	require.Len(t, authorizeAmounts(f.testBundle), 1)
	status, attempt := f.postingOf(ctx, t, f.first)
	require.Equal(t, charges.PostingAccepted, status, "recorded again from the registry's word")
	require.Equal(t, 1, attempt)

	_, err = f.sweep.Work(ctx, t, f.tx, charges.SweepArgs{}, nil)
	require.NoError(t, err)
	rivertest.RequireInserted[*riverpgxv5.Driver](ctx, t, f.driver, charges.AnnulArgs{PaymentID: f.first}, nil)
	_, err = f.annul.Work(ctx, t, f.tx, charges.AnnulArgs{PaymentID: f.first}, nil)
	require.NoError(t, err)
	status, _ = f.postingOf(ctx, t, f.first)
	require.Equal(t, charges.PostingAnnulled, status)

	_, err = f.authorize.Work(ctx, t, f.tx, charges.AuthorizeArgs{ChargeID: id, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Authorized, f.get(ctx, t, id).Status)
	var second string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT payment_id FROM registry_postings WHERE charge_id = $1 AND attempt = 2`,
		id).Scan(&second))
	_, err = f.post.Work(ctx, t, f.tx, charges.PostArgs{PaymentID: second}, nil)
	require.NoError(t, err)
	status, _ = f.postingOf(ctx, t, second)
	require.Equal(t, charges.PostingAccepted, status)
	f.gateway.CaptureFunc = gatewaytest.Answer(succeeded, nil)
	_, err = f.capture.Work(ctx, t, f.tx, charges.CaptureArgs{ChargeID: id, Attempt: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, charges.Succeeded, f.get(ctx, t, id).Status)
	return second
}

func (f *forgottenFine) postingOf(ctx context.Context, t *testing.T, paymentID string) (charges.PostingStatus, int) {
	t.Helper()
	var status charges.PostingStatus
	var attempt int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT status, attempt FROM registry_postings WHERE payment_id = $1`, paymentID).
		Scan(&status, &attempt))
	return status, attempt
}

// captures are the gateway's captures: key and amount.
func (f *forgottenFine) captures() map[string]int64 {
	out := map[string]int64{}
	for _, call := range f.gateway.CallsOf(gateway.OpCapture) {
		out[call.Key] = call.Request.Amount
	}
	return out
}

// A fine's first attempt was posted and accepted at the registry, then a
// restore forgot the posting and the charge went on to its second
// attempt. The first attempt's payment, under an identifier rebill
// derives for that attempt, is rebill's own, not paid elsewhere: its
// posting is recorded again, accepted, the sweep annuls it at the
// registry (no money was captured on it), and only then is the second
// attempt held, posted and captured, once.
func TestForgottenEarlierAttemptsPaymentIsAnnulledNotPaidElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupForgottenFine(ctx, t)
	second := f.settleSecondAttempt(ctx, t)

	f.requireBook(ctx, t, map[string]string{f.first: "annulled", second: "accepted"})
	require.Equal(t, map[string]int64{f.charge.Key() + ":a2:capture": 500}, f.captures(), "captured once, at the discount")
	require.Equal(t, []int64{500, 500}, authorizeAmounts(f.testBundle))
	require.Zero(t, f.get(ctx, t, f.charge.ID).PaidOutside)
}

// Beside the forgotten payment of the first attempt, a payment made at a
// bank still counts as paid elsewhere: the second attempt is for the
// rest, while the first attempt's payment is annulled.
func TestForgottenEarlierAttemptsPaymentBesideAPaymentMadeElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupForgottenFine(ctx, t)
	bank, err := f.sim.PaidOutside(ctx, fineUIN, 200)
	require.NoError(t, err)
	second := f.settleSecondAttempt(ctx, t)

	f.requireBook(ctx, t, map[string]string{f.first: "annulled", bank.PaymentID: "accepted", second: "accepted"})
	got := f.get(ctx, t, f.charge.ID)
	require.EqualValues(t, 200, got.PaidOutside, "the bank's payment is paid elsewhere")
	require.Equal(t, map[string]int64{f.charge.Key() + ":a2:capture": 300}, f.captures(), "the rest, captured once")
	require.Equal(t, []int64{500, 300}, authorizeAmounts(f.testBundle))
}

// The registry may show a forgotten payment of an earlier attempt only
// when the attempt's own posting asks it afresh (the answer the hold was
// checked with was older): the posting recorded again is annulled before
// the attempt's payment is sent, so the registry never holds both.
func TestPostingAnnulsAForgottenEarlierPaymentBeforeItIsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPostingOn(ctx, t, true)
	first := b.id
	require.NoError(t, b.sim.Gateways()[0].Post(ctx, registry.Payment{PaymentID: first, UIN: b.charge.RegistryUIN, Amount: 500}))
	second := registry.PaymentID(b.charge.Key(), 2, 500)
	_, err := b.pool.Exec(ctx, `DELETE FROM registry_postings WHERE payment_id = $1`, first)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE charges SET attempt_count = 2 WHERE id = $1`, b.charge.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 2, $3, 500, 'posting', $4, $4)`, second, b.charge.ID, b.charge.RegistryUIN, postingStart)
	require.NoError(t, err)

	_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: second}, nil)
	require.NoError(t, err)
	status, _, _ := b.posting(ctx, t, first)
	require.Equal(t, charges.PostingAnnulled, status, "recorded again, then annulled")
	var attempt int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT attempt FROM registry_postings WHERE payment_id = $1`, first).Scan(&attempt))
	require.Equal(t, 1, attempt)
	status, _, _ = b.posting(ctx, t, second)
	require.Equal(t, charges.PostingAccepted, status)
	book, err := b.sim.Ledger(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range book {
		got[e.PaymentID] = e.Status
	}
	require.Equal(t, map[string]string{first: "annulled", second: "accepted"}, got)
}
