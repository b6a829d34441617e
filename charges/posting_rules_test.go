package charges_test

// The rules of postings, specified on the post, annul and sweep workers
// over a real database with rivertest: what the registry's answers do to
// a posting and to the fine's charge, and which postings are annulled.

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/registry"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

const giveUpAfter = 24 * time.Hour

// postingBundle is a fine's charge holding 500 at postingStart, its posting
// waiting, and the registry's workers over one fake gateway.
type postingBundle struct {
	pool   *pgxpool.Pool
	clock  *testsupport.Clock
	gw     *registrytest.Fake
	sim    *registrysim.Sim // the registry instead of gw, when set
	post   *rivertest.Worker[charges.PostArgs, pgx.Tx]
	annul  *rivertest.Worker[charges.AnnulArgs, pgx.Tx]
	sweep  *rivertest.Worker[charges.SweepArgs, pgx.Tx]
	charge charges.Charge
	id     string
	tx     pgx.Tx // the job's transaction, rolled back at the end
}

func setupPosting(ctx context.Context, t *testing.T) *postingBundle {
	return setupPostingOn(ctx, t, false)
}

// setupPostingOn is setupPosting, with the simulated registry (its own
// book, gateway gmp1) in place of the fake gateway when withSim.
func setupPostingOn(ctx context.Context, t *testing.T, withSim bool) *postingBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(postingStart)
	gw := registrytest.NewFake(t, "gmp1")
	gateways := []registry.Gateway{gw}
	var sim *registrysim.Sim
	if withSim {
		sim = &registrysim.Sim{Pool: pool, Clock: clk, Names: []string{"gmp1"}}
		gateways = sim.Gateways()
	}
	poster := &charges.Poster{Pool: pool, Gateways: registry.NewBalancer(gateways, time.Second), Clock: clk,
		GiveUpAfter: giveUpAfter, Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: clk.Now},
		Logger: zerolog.Nop()}
	workers := river.NewWorkers()
	charges.RegisterPoster(workers, poster)
	charges.Register(workers, &charges.Pipeline{Pool: pool, Clock: clk})
	config := &river.Config{Logger: slog.New(slog.DiscardHandler), Test: river.TestConfig{Time: clk}, TestOnly: true,
		Workers: workers}
	driver := riverpgxv5.New(pool)
	b := &postingBundle{pool: pool, clock: clk, gw: gw, sim: sim,
		post:  rivertest.NewWorker(t, driver, config, &charges.PostWorker{Poster: poster}),
		annul: rivertest.NewWorker(t, driver, config, &charges.AnnulWorker{Poster: poster}),
		sweep: rivertest.NewWorker(t, driver, config, &charges.SweepWorker{Poster: poster}),
	}
	b.charge, b.id = b.heldFine(ctx, t, "18810142200817004923")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	b.tx = tx
	return b
}

// heldFine files a fine's charge of 500 authorized at postingStart, at a fixed
// price (no deadline to post by), and its posting.
func (b *postingBundle) heldFine(ctx context.Context, t *testing.T, uin string) (charges.Charge, string) {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'sim1', 'tok', 12, 2030, $2, $2)`, enrollmentID, postingStart)
	require.NoError(t, err)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, _, err = (&charges.Store{Queue: insertOnly(t, b.pool)}).CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: uin, Due: postingStart, Amount: 500, Currency: "RUB", Gateway: "sim1", Token: "tok", RegistryUIN: uin}, postingStart)
		return err
	}))
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'authorized', authorized_at = $2 WHERE id = $1`, c.ID, postingStart)
	require.NoError(t, err)
	c.AttemptCount = 1
	id := registry.PaymentID(c.Key(), 1, 500)
	_, err = b.pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, id, c.ID, uin, postingStart)
	require.NoError(t, err)
	return c, id
}

// posting reads the posting's status, gateway and last error.
func (b *postingBundle) posting(ctx context.Context, t *testing.T, id string) (status charges.PostingStatus, gateway, lastError string) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, coalesce(gateway, ''), coalesce(last_error, '')
		FROM registry_postings WHERE payment_id = $1`, id).Scan(&status, &gateway, &lastError))
	return status, gateway, lastError
}

func (b *postingBundle) chargeNow(ctx context.Context, t *testing.T) charges.Charge {
	t.Helper()
	c, err := charges.Get(ctx, b.pool, b.charge.ID)
	require.NoError(t, err)
	return c
}

// A posting the registry accepts is recorded accepted, through the
// gateway that took it, and the hold's capture is enqueued: the registry
// is told of the payment under its id, the fine's UIN and the amount held.
func TestAcceptedPostingEnqueuesTheCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(nil)
	_, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)

	status, gateway, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAccepted, status)
	require.Equal(t, "gmp1", gateway)
	require.Equal(t, []registrytest.Call{{Op: "post", PaymentID: b.id,
		Payment: registry.Payment{PaymentID: b.id, UIN: "18810142200817004923", Amount: 500, PaidAt: postingStart}}}, b.gw.CallsOf("post"))
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
	require.Equal(t, charges.CaptureArgs{ChargeID: b.charge.ID, Attempt: 1}, job.Args)

	// Run again (a retried job): nothing is posted twice.
	_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Len(t, b.gw.CallsOf("post"), 1)
}

// A posting the registry refuses for good fails: the charge goes to
// review (whose hold check releases the hold) and nothing is captured.
func TestRefusedPostingSendsTheChargeToReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(registry.ErrRejected)
	_, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)

	status, _, lastError := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingFailed, status)
	require.Contains(t, lastError, "rejected")
	c := b.chargeNow(ctx, t)
	require.Equal(t, charges.RequiresReview, c.Status)
	require.Contains(t, c.ReviewReason, "registry did not accept")
	rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
}

// A registry that does nothing is waited for (the job snoozes, the
// posting stays open) until GiveUpAfter has passed on the service clock
// since the posting was made; then the posting is abandoned (an earlier
// try may have reached the registry, its answer lost): the charge goes to
// review and its hold is released. It fails for good once the registry
// answers that it holds no such payment.
func TestUnavailableRegistryIsWaitedForThenGivenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = registrytest.Posts(registry.ErrUnavailable)
	res, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingPosting, status)
	require.Equal(t, charges.Authorized, b.chargeNow(ctx, t).Status)

	b.clock.Advance(giveUpAfter + time.Minute)
	res, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "it keeps asking")
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAbandoned, status)
	require.Equal(t, charges.RequiresReview, b.chargeNow(ctx, t).Status)
	rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.ReleaseHoldArgs{}, nil)

	b.gw.LookupFunc = registrytest.LooksUp(false, false, nil)
	res, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingFailed, status, "the registry holds no such payment, and it is never posted again")
	require.Len(t, b.gw.CallsOf("post"), 2, "nothing is posted once abandoned")
}

// A posting whose answer was lost is looked up by its payment id: found,
// it was accepted and is not posted again; found annulled, it is recorded
// annulled and never captured (the charge goes to review, its hold is
// released); not found, the job fails and River retries it with the same
// payment id.
func TestLostAnswerIsLookedUpBeforeAnythingElse(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		found, annulled bool
		wantStatus      charges.PostingStatus
		wantErr         bool
	}{
		"found: accepted":          {found: true, wantStatus: charges.PostingAccepted},
		"found annulled: not held": {found: true, annulled: true, wantStatus: charges.PostingAnnulled},
		"not found: retried":       {wantStatus: charges.PostingPosting, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupPosting(ctx, t)
			b.gw.PostFunc = registrytest.Posts(registry.ErrUnknownOutcome)
			b.gw.LookupFunc = registrytest.LooksUp(tc.found, tc.annulled, nil)
			_, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.Equal(t, tc.wantErr, err != nil, "%v", err)
			status, _, _ := b.posting(ctx, t, b.id)
			require.Equal(t, tc.wantStatus, status)
			require.Len(t, b.gw.CallsOf("post"), 1)
			require.Equal(t, []registrytest.Call{{Op: "lookup", PaymentID: b.id}}, b.gw.CallsOf("lookup"))
			if tc.found && !tc.annulled {
				rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
			} else {
				rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
			}
			if tc.annulled {
				c := b.chargeNow(ctx, t)
				require.Equal(t, charges.RequiresReview, c.Status)
				require.Contains(t, c.ReviewReason, "annulled")
				rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.ReleaseHoldArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)
			}
		})
	}
}

// A charge that no longer wants its hold posted (its bill withdrawn or
// its enrollment cancelled: a void was requested) has its posting
// cancelled without sending it, once the registry shows an earlier run
// did not make it.
func TestPostingNoLongerWantedIsCancelledUnsent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	_, err := b.pool.Exec(ctx, `UPDATE charges SET void_requested = true WHERE id = $1`, b.charge.ID)
	require.NoError(t, err)
	b.gw.LookupFunc = registrytest.LooksUp(false, false, nil)
	_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingCancelled, status)
	require.Empty(t, b.gw.CallsOf("post"))
	rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
}

// The sweep annuls the accepted postings whose money will not be
// captured (here, a voided charge's) and leaves a captured one alone; the
// annulment is recorded once the registry confirms it, and an annulled
// posting is not annulled again.
func TestSweepAnnulsAcceptedPostingsWhoseMoneyWasNotCaptured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	captured, capturedID := b.heldFine(ctx, t, "18810162210739014395")
	_, err := b.pool.Exec(ctx, `UPDATE registry_postings SET status = 'accepted'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'voided' WHERE id = $1`, b.charge.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'succeeded' WHERE id = $1`, captured.ID)
	require.NoError(t, err)

	_, err = b.sweep.Work(ctx, t, b.tx, charges.SweepArgs{}, nil)
	require.NoError(t, err)
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.AnnulArgs{}, nil)
	require.Equal(t, charges.AnnulArgs{PaymentID: b.id}, job.Args, "only the voided charge's posting")

	b.gw.AnnulFunc = registrytest.Annuls(nil)
	_, err = b.annul.Work(ctx, t, b.tx, charges.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAnnulled, status)
	status, _, _ = b.posting(ctx, t, capturedID)
	require.Equal(t, charges.PostingAccepted, status)

	_, err = b.annul.Work(ctx, t, b.tx, charges.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Len(t, b.gw.CallsOf("annul"), 1, "an annulled posting is not annulled again")
}

// An annulment whose answer was lost counts only once the registry shows
// the payment annulled; until then the posting stays accepted and the job
// is retried.
func TestLostAnnulmentIsCheckedBeforeItIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	_, err := b.pool.Exec(ctx, `UPDATE registry_postings SET status = 'accepted'`)
	require.NoError(t, err)
	b.gw.AnnulFunc = registrytest.Annuls(registry.ErrUnknownOutcome)
	b.gw.LookupFunc = registrytest.LooksUp(true, false, nil)
	_, err = b.annul.Work(ctx, t, b.tx, charges.AnnulArgs{PaymentID: b.id}, nil)
	require.Error(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAccepted, status)

	b.gw.LookupFunc = registrytest.LooksUp(true, true, nil)
	_, err = b.annul.Work(ctx, t, b.tx, charges.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, charges.PostingAnnulled, status)
}

// A payment the registry holds annulled is never captured, however rebill
// learns it: on the look-up after a lost answer (the registry annulled the
// payment whose acceptance it did not answer), or on the replay that asks
// for a processing payment's outcome. The posting is recorded annulled,
// the charge goes to review and its hold is released; the payment id is
// not posted again (a new payment comes only with a new attempt). Judged
// on the simulated registry's own book.
func TestPaymentFoundAnnulledIsNeverCaptured(t *testing.T) {
	t.Parallel()
	on, one := true, 1
	for name, faults := range map[string]registrysim.FaultsPatch{
		"on the look-up after a lost answer": {LoseResponse: &on, AnnulUnanswered: &on},
		"on the replay after processing":     {Processing: &one, AnnulUnanswered: &on},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupPostingOn(ctx, t, true)
			_, err := b.sim.SetFaults(ctx, "gmp1", faults)
			require.NoError(t, err)
			var res *rivertest.WorkResult
			for run := 0; run < 3 && (res == nil || res.EventKind != river.EventKindJobCompleted); run++ {
				res, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
				require.NoError(t, err)
			}
			require.Equal(t, river.EventKindJobCompleted, res.EventKind)

			status, _, lastError := b.posting(ctx, t, b.id)
			require.Equal(t, charges.PostingAnnulled, status)
			require.Contains(t, lastError, "annulled")
			rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
			c := b.chargeNow(ctx, t)
			require.Equal(t, charges.RequiresReview, c.Status, "never captured")
			rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.ReleaseHoldArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)
			book, err := b.sim.Ledger(ctx)
			require.NoError(t, err)
			require.Len(t, book, 1, "posted once")
			require.Equal(t, "annulled", book[0].Status)

			_, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			status, _, _ = b.posting(ctx, t, b.id)
			require.Equal(t, charges.PostingAnnulled, status, "final")
		})
	}
}

// A posting the registry keeps processing past GiveUpAfter is abandoned,
// not failed: the charge goes to review, its hold is released, and its
// payment is asked to be withdrawn. The job then asks the registry until
// it says: accepted, the payment is annulled there; annulled, so recorded;
// no such payment, or refused, failed. Until then (still processing, no
// answer, an annulment whose answer was lost and not confirmed) it stays
// abandoned and the job snoozes.
func TestPostingProcessingPastTheGiveUpIsAbandonedUntilTheRegistrySays(t *testing.T) {
	t.Parallel()
	pending := &registry.PendingError{Gateway: "gmp1", RetryAfter: time.Second}
	for name, tc := range map[string]struct {
		found, annulled bool
		lookupErr       error
		annulErr        error
		want            charges.PostingStatus
		wantAnnul       bool
	}{
		"accepted: annulled there":           {found: true, want: charges.PostingAnnulled, wantAnnul: true},
		"annulled there: recorded":           {found: true, annulled: true, want: charges.PostingAnnulled},
		"no such payment: failed":            {want: charges.PostingFailed},
		"refused: failed":                    {lookupErr: registry.ErrRejected, want: charges.PostingFailed},
		"still processing: withdrawn, asked": {lookupErr: pending, annulErr: pending, want: charges.PostingAbandoned, wantAnnul: true},
		"no answer: asked again":             {lookupErr: registry.ErrUnavailable, want: charges.PostingAbandoned},
		"annulment unconfirmed: asked again": {found: true, annulErr: registry.ErrUnknownOutcome, want: charges.PostingAbandoned, wantAnnul: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupPosting(ctx, t)
			b.gw.PostFunc = registrytest.Posts(pending)
			res, err := b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			require.Equal(t, river.EventKindJobSnoozed, res.EventKind)

			b.clock.Advance(giveUpAfter + time.Minute)
			b.gw.AnnulFunc = registrytest.Annuls(pending)
			res, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
			status, _, lastError := b.posting(ctx, t, b.id)
			require.Equal(t, charges.PostingAbandoned, status)
			require.Contains(t, lastError, "processing")
			require.Len(t, b.gw.CallsOf("annul"), 1, "withdrawn at once")
			c := b.chargeNow(ctx, t)
			require.Equal(t, charges.RequiresReview, c.Status)
			rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.ReleaseHoldArgs{ChargeID: b.charge.ID, Attempt: 1}, nil)

			b.gw.LookupFunc = registrytest.LooksUp(tc.found, tc.annulled, tc.lookupErr)
			b.gw.AnnulFunc = registrytest.Annuls(tc.annulErr)
			b.clock.Advance(time.Hour)
			res, err = b.post.Work(ctx, t, b.tx, charges.PostArgs{PaymentID: b.id}, nil)
			require.NoError(t, err)
			status, _, _ = b.posting(ctx, t, b.id)
			require.Equal(t, tc.want, status)
			if tc.want == charges.PostingAbandoned {
				require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "it keeps asking")
			} else {
				require.Equal(t, river.EventKindJobCompleted, res.EventKind)
			}
			require.Equal(t, tc.wantAnnul, len(b.gw.CallsOf("annul")) == 2, "annulments: %v", b.gw.CallsOf("annul"))
			require.Len(t, b.gw.CallsOf("post"), 2, "the post and its replay: an abandoned posting is never posted again")
			rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
		})
	}
}
