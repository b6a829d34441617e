package gisgmp_test

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
	"github.com/rebill/rebill/gisgmp"
	"github.com/rebill/rebill/internal/dbtest"
	"github.com/rebill/rebill/internal/testsupport"
)

const giveUpAfter = 24 * time.Hour

// postingBundle is a fine's charge holding 500 at start, its posting
// waiting, and the registry's workers over one fake gateway.
type postingBundle struct {
	pool   *pgxpool.Pool
	clock  *testsupport.Clock
	gw     *fakeGateway
	post   *rivertest.Worker[gisgmp.PostArgs, pgx.Tx]
	annul  *rivertest.Worker[gisgmp.AnnulArgs, pgx.Tx]
	sweep  *rivertest.Worker[gisgmp.SweepArgs, pgx.Tx]
	charge charges.Charge
	id     string
	tx     pgx.Tx // the job's transaction, rolled back at the end
}

func setupPosting(ctx context.Context, t *testing.T) *postingBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	gw := newFakeGateway(t, "gmp1")
	poster := &gisgmp.Poster{Pool: pool, Gateways: gisgmp.NewBalancer([]gisgmp.Gateway{gw}, time.Second), Clock: clk,
		GiveUpAfter: giveUpAfter, Retry: charges.RetryPolicy{Base: time.Second, Max: time.Minute, Now: clk.Now},
		Logger: zerolog.Nop()}
	workers := river.NewWorkers()
	gisgmp.Register(workers, poster)
	charges.Register(workers, &charges.Pipeline{Pool: pool, Clock: clk})
	config := &river.Config{Logger: slog.New(slog.DiscardHandler), Test: river.TestConfig{Time: clk}, TestOnly: true,
		Workers: workers}
	driver := riverpgxv5.New(pool)
	b := &postingBundle{pool: pool, clock: clk, gw: gw,
		post:  rivertest.NewWorker(t, driver, config, &gisgmp.PostWorker{Poster: poster}),
		annul: rivertest.NewWorker(t, driver, config, &gisgmp.AnnulWorker{Poster: poster}),
		sweep: rivertest.NewWorker(t, driver, config, &gisgmp.SweepWorker{Poster: poster}),
	}
	b.charge, b.id = b.heldFine(ctx, t, "18810142200817004923")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	b.tx = tx
	return b
}

// heldFine files a fine's charge of 500 authorized at start, at a fixed
// price (no deadline to post by), and its posting.
func (b *postingBundle) heldFine(ctx context.Context, t *testing.T, uin string) (charges.Charge, string) {
	t.Helper()
	enrollmentID := uuid.New()
	_, err := b.pool.Exec(ctx, `INSERT INTO enrollments (id, customer_id, kind, sts, status, currency, max_amount, pm_gateway,
			pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, 'cus_1', 'fines', '77УА123456', 'active', 'RUB', 100000, 'sim1', 'tok', 12, 2030, $2, $2)`, enrollmentID, start)
	require.NoError(t, err)
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		c, _, err = charges.CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: enrollmentID, CustomerID: "cus_1",
			BillID: uin, Due: start, Amount: 500, Currency: "RUB", Gateway: "sim1", Token: "tok", RegistryUIN: uin}, start)
		return err
	}))
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'authorized', authorized_at = $2 WHERE id = $1`, c.ID, start)
	require.NoError(t, err)
	c.AttemptCount = 1
	id := gisgmp.PaymentID(c.Key(), 1, 500)
	_, err = b.pool.Exec(ctx, `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at)
		VALUES ($1, $2, 1, $3, 500, 'posting', $4, $4)`, id, c.ID, uin, start)
	require.NoError(t, err)
	return c, id
}

// posting reads the posting's status, gateway and last error.
func (b *postingBundle) posting(ctx context.Context, t *testing.T, id string) (status gisgmp.PostingStatus, gateway, lastError string) {
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
	b.gw.PostFunc = posts(nil)
	_, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)

	status, gateway, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAccepted, status)
	require.Equal(t, "gmp1", gateway)
	require.Equal(t, []registryCall{{Op: "post", PaymentID: b.id,
		Payment: gisgmp.Payment{PaymentID: b.id, UIN: "18810142200817004923", Amount: 500, PaidAt: start}}}, b.gw.callsOf("post"))
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
	require.Equal(t, charges.CaptureArgs{ChargeID: b.charge.ID, Attempt: 1}, job.Args)

	// Run again (a retried job): nothing is posted twice.
	_, err = b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Len(t, b.gw.callsOf("post"), 1)
}

// A posting the registry refuses for good fails: the charge goes to
// review (whose hold check releases the hold) and nothing is captured.
func TestRefusedPostingSendsTheChargeToReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = posts(gisgmp.ErrRejected)
	_, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)

	status, _, lastError := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusFailed, status)
	require.Contains(t, lastError, "rejected")
	c := b.chargeNow(ctx, t)
	require.Equal(t, charges.RequiresReview, c.Status)
	require.Contains(t, c.ReviewReason, "registry did not accept")
	rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
}

// A registry that does nothing is waited for (the job snoozes, the
// posting stays open) until GiveUpAfter has passed on the service clock
// since the posting was made; then the posting fails for good.
func TestUnavailableRegistryIsWaitedForThenGivenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPosting(ctx, t)
	b.gw.PostFunc = posts(gisgmp.ErrUnavailable)
	res, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusPosting, status)
	require.Equal(t, charges.Authorized, b.chargeNow(ctx, t).Status)

	b.clock.Advance(giveUpAfter + time.Minute)
	res, err = b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusFailed, status)
	require.Equal(t, charges.RequiresReview, b.chargeNow(ctx, t).Status)
}

// A posting whose answer was lost is looked up by its payment id: found,
// it was accepted and is not posted again; not found, the job fails and
// River retries it with the same payment id.
func TestLostAnswerIsLookedUpBeforeAnythingElse(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		found      bool
		wantStatus gisgmp.PostingStatus
		wantErr    bool
	}{
		"found: accepted":    {found: true, wantStatus: gisgmp.StatusAccepted},
		"not found: retried": {wantStatus: gisgmp.StatusPosting, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupPosting(ctx, t)
			b.gw.PostFunc = posts(gisgmp.ErrUnknownOutcome)
			b.gw.LookupFunc = looksUp(tc.found, false, nil)
			_, err := b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
			require.Equal(t, tc.wantErr, err != nil, "%v", err)
			status, _, _ := b.posting(ctx, t, b.id)
			require.Equal(t, tc.wantStatus, status)
			require.Len(t, b.gw.callsOf("post"), 1)
			require.Equal(t, []registryCall{{Op: "lookup", PaymentID: b.id}}, b.gw.callsOf("lookup"))
			if tc.found {
				rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
			} else {
				rivertest.RequireNotInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, charges.CaptureArgs{}, nil)
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
	b.gw.LookupFunc = looksUp(false, false, nil)
	_, err = b.post.Work(ctx, t, b.tx, gisgmp.PostArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusCancelled, status)
	require.Empty(t, b.gw.callsOf("post"))
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

	_, err = b.sweep.Work(ctx, t, b.tx, gisgmp.SweepArgs{}, nil)
	require.NoError(t, err)
	job := rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, b.tx, gisgmp.AnnulArgs{}, nil)
	require.Equal(t, gisgmp.AnnulArgs{PaymentID: b.id}, job.Args, "only the voided charge's posting")

	b.gw.AnnulFunc = annuls(nil)
	_, err = b.annul.Work(ctx, t, b.tx, gisgmp.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAnnulled, status)
	status, _, _ = b.posting(ctx, t, capturedID)
	require.Equal(t, gisgmp.StatusAccepted, status)

	_, err = b.annul.Work(ctx, t, b.tx, gisgmp.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	require.Len(t, b.gw.callsOf("annul"), 1, "an annulled posting is not annulled again")
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
	b.gw.AnnulFunc = annuls(gisgmp.ErrUnknownOutcome)
	b.gw.LookupFunc = looksUp(true, false, nil)
	_, err = b.annul.Work(ctx, t, b.tx, gisgmp.AnnulArgs{PaymentID: b.id}, nil)
	require.Error(t, err)
	status, _, _ := b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAccepted, status)

	b.gw.LookupFunc = looksUp(true, true, nil)
	_, err = b.annul.Work(ctx, t, b.tx, gisgmp.AnnulArgs{PaymentID: b.id}, nil)
	require.NoError(t, err)
	status, _, _ = b.posting(ctx, t, b.id)
	require.Equal(t, gisgmp.StatusAnnulled, status)
}
