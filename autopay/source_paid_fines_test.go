package autopay_test

// A fine's paid_amount from its bill source: the figure may include
// rebill's own payment and names no payment, so the registry stays the
// judge. These run the source's pull, the bill scan and the charges
// pipeline's authorize step against a registry that answers as told.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/enrollments"
)

// answeringRegistry is a state payment registry that holds, against each
// UIN, one payment made at a bank (paid), and counts the quittance
// questions. Nothing is posted to it in these tests.
type answeringRegistry struct {
	mu    sync.Mutex
	paid  map[string]int64
	asked int
}

func (r *answeringRegistry) Name() string { return "gmp-test" }

func (r *answeringRegistry) Post(context.Context, registry.Payment) error {
	return errors.New("nothing is posted in these tests")
}

func (r *answeringRegistry) Annul(context.Context, string) error {
	return errors.New("nothing is annulled in these tests")
}

func (r *answeringRegistry) Lookup(context.Context, string) (bool, bool, error) {
	return false, false, nil
}

func (r *answeringRegistry) Quittance(_ context.Context, uin string) (registry.Quittance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	if r.paid[uin] == 0 {
		return registry.Quittance{}, nil
	}
	return registry.Quittance{Payments: []registry.QuittancePayment{{PaymentID: "bank-" + uin, Amount: r.paid[uin]}}}, nil
}

func (r *answeringRegistry) pay(uin string, amount int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paid == nil {
		r.paid = map[string]int64{}
	}
	r.paid[uin] = amount
}

func (r *answeringRegistry) questions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// heldPostings records the holds the pipeline hands over to be posted.
type heldPostings struct {
	mu   sync.Mutex
	held []int64
}

func (h *heldPostings) Held(_ context.Context, _ pgx.Tx, c charges.Charge) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, c.Amount)
	return nil
}

func (h *heldPostings) amounts() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.held...)
}

// fineFlow is autopay pulling fines from a fake source, with the charges
// pipeline that attempts them: a card gateway, the registry asked what
// was paid outside rebill (through charges.Poster, whose answers are
// cached, and which knows rebill's postings), and the holds handed over
// to be posted recorded.
type fineFlow struct {
	*sourceBundle
	gateway  *gatewaytest.Gateway
	registry *answeringRegistry
	postings *heldPostings
	pipeline *charges.Pipeline
	config   *river.Config
}

func setupFines(t *testing.T) *fineFlow {
	t.Helper()
	s := setupSource(t, time.Hour, 50)
	gw := gatewaytest.New(t, "sim1")
	gw.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "hold"}, nil)
	answering := &answeringRegistry{}
	postings := &heldPostings{}
	poster := &charges.Poster{Pool: s.pool, Gateways: registry.NewBalancer([]registry.Gateway{answering}, time.Second), Clock: s.clock,
		Logger: zerolog.Nop()}
	s.autopay.Postings = poster
	pipeline := &charges.Pipeline{Pool: s.pool, Store: s.autopay.Charges, Gateways: fleet.New([]gateway.Gateway{gw}, fleet.DefaultBreaker),
		Owners: charges.Owners{Enrollments: s.outcomes}, Postings: postings, Outside: poster,
		Clock: s.clock, CallTimeout: 5 * time.Second, UnavailableFor: time.Hour, Logger: zerolog.Nop(),
		Retry: charges.RetryPolicy{Base: time.Millisecond, Max: 10 * time.Millisecond, Now: time.Now}}
	workers := river.NewWorkers()
	charges.Register(workers, pipeline)
	config := &river.Config{Logger: slog.New(slog.DiscardHandler), TestOnly: true, Test: river.TestConfig{Time: s.clock},
		Workers: workers}
	return &fineFlow{sourceBundle: s, gateway: gw, registry: answering, postings: postings, pipeline: pipeline, config: config}
}

// fine is fine n of sts as the source publishes it, paid the figure the
// source knows: 100,000, or 50,000 until the end of 2027-03-20.
func (f *fineFlow) fine(sts string, n int, paid int64) billsource.Bill {
	b := f.fineOf(sts, n)
	b.PaidAmount = paid
	return b
}

// authorize runs the authorize job of c's current attempt, committed.
func (f *fineFlow) authorize(t *testing.T, c charges.Charge) charges.Charge {
	t.Helper()
	ctx := context.Background()
	w := rivertest.NewWorker(t, riverpgxv5.New(f.pool), f.config, &charges.AuthorizeWorker{Pipeline: f.pipeline})
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = w.Work(ctx, t, tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	got, err := charges.Get(ctx, f.pool, c.ID)
	require.NoError(t, err)
	return got
}

// authorizeAmounts are the amounts of the holds asked of the gateway.
func (f *fineFlow) authorizeAmounts() []int64 {
	var out []int64
	for _, c := range f.gateway.CallsOf(gateway.OpAuthorize) {
		out = append(out, c.Request.Amount)
	}
	return out
}

// accept records that the registry accepted rebill's posting of c's
// current attempt at its amount, as the registry's poster would.
func (f *fineFlow) accept(t *testing.T, c charges.Charge) string {
	t.Helper()
	id := uuid.NewString()
	_, err := f.pool.Exec(context.Background(), `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status,
			created_at, updated_at) VALUES ($1, $2, $3, $4, $5, 'accepted', $6, $6)`,
		id, c.ID, c.AttemptCount, c.RegistryUIN, c.Amount, f.clock.Now())
	require.NoError(t, err)
	return id
}

// A source that reports a fine paid while the registry holds nothing
// against it does not make it paid_elsewhere: the registry is asked, and
// the charge goes on at the price the registry's answer leaves.
func TestFineItsSourceReportsPaidButTheRegistryDoesNotIsCharged(t *testing.T) {
	t.Parallel()
	f := setupFines(t)
	e := f.enrol(t, finesOf("cus_1", "77УА123456", 1000000))
	f.fake.Publish(f.fine("77УА123456", 1, 50000))
	require.Equal(t, 1, f.pull(t))
	b := f.bill(t, e, uin(1))
	require.Equal(t, enrollments.BillPaying, b.Status, "the source's figure alone pays nothing")
	require.Equal(t, int64(0), b.PaidOutside)
	require.Equal(t, int64(50000), b.AmountDue(f.clock.Now()))
	c := f.charge(t, b)
	require.Equal(t, int64(50000), c.SourcePaid)

	c = f.authorize(t, c)
	require.Equal(t, 1, f.registry.questions(), "the registry is asked before the hold")
	require.Equal(t, charges.Authorized, c.Status)
	require.Equal(t, []int64{50000}, f.authorizeAmounts(), "held at the discounted price: the registry holds nothing")
	require.Equal(t, []int64{50000}, f.postings.amounts())
	require.Equal(t, enrollments.BillPaying, f.bill(t, e, uin(1)).Status)
}

// A source's report above the registry's last answer has the registry
// asked afresh before the next hold: an answer cached minutes ago, from
// before the payment at the bank, would hold the fine a second time.
// The registry agreeing, the fine is paid_elsewhere and nothing is held.
func TestFineItsSourceReportsPaidIsCheckedAfreshAndPaidElsewhereOnTheRegistrysWord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupFines(t)
	e := f.enrol(t, finesOf("cus_1", "77УА123456", 1000000))
	f.fake.Publish(f.fine("77УА123456", 1, 0))
	require.Equal(t, 1, f.pull(t))
	f.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "insufficient_funds"}, nil)
	c := f.authorize(t, f.charge(t, f.bill(t, e, uin(1))))
	require.Equal(t, charges.Declined, c.Status)
	require.Equal(t, 1, f.registry.questions())

	// The customer pays at a bank; the registry has it, and so does the
	// source. A minute later they give a new card: the retry is at once.
	f.registry.pay(uin(1), 50000)
	f.clock.Advance(time.Minute)
	f.fake.Publish(f.fine("77УА123456", 1, 50000))
	f.pull(t)
	require.Equal(t, enrollments.BillPaying, f.bill(t, e, uin(1)).Status, "not paid_elsewhere before the registry says so")
	f.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded, Reference: "hold"}, nil)
	var retried []charges.Charge
	f.inTx(t, func(tx pgx.Tx) (err error) {
		retried, err = f.autopay.Charges.EnrollmentPaymentMethodChanged(ctx, tx, e.ID, []uuid.UUID{c.ID}, "sim1", "tok_new",
			f.clock.Now())
		return err
	})
	require.Len(t, retried, 1)

	c = f.authorize(t, retried[0])
	require.Equal(t, 2, f.registry.questions(), "asked afresh, not answered from the cache")
	require.Equal(t, charges.Voided, c.Status)
	require.Equal(t, charges.FailurePaidElsewhere, c.FailureCode)
	require.Equal(t, []int64{50000}, f.authorizeAmounts(), "only the declined first attempt reached the gateway")
	require.Empty(t, f.postings.amounts())
	done := f.bill(t, e, uin(1))
	require.Equal(t, enrollments.BillPaidElsewhere, done.Status)
	require.Equal(t, int64(50000), done.PaidOutside)
}

// While one of rebill's own postings of the fine may stand at the
// registry, the source's figure may be that very payment: it is ignored.
// Once the posting is annulled, the same figure is taken.
func TestFineItsSourceReportsPaidWhileRebillsPostingIsAcceptedIsIgnored(t *testing.T) {
	t.Parallel()
	f := setupFines(t)
	e := f.enrol(t, finesOf("cus_1", "77УА123456", 1000000))
	f.fake.Publish(f.fine("77УА123456", 1, 0))
	require.Equal(t, 1, f.pull(t))
	c := f.authorize(t, f.charge(t, f.bill(t, e, uin(1))))
	require.Equal(t, charges.Authorized, c.Status)
	payment := f.accept(t, c)

	f.clock.Advance(time.Minute)
	f.fake.Publish(f.fine("77УА123456", 1, 50000)) // rebill's own payment, as the source sees it
	f.pull(t)
	b := f.bill(t, e, uin(1))
	require.Equal(t, int64(0), b.SourcePaid, "ignored on the bill")
	require.Equal(t, int64(0), f.charge(t, b).SourcePaid, "ignored on the charge")
	require.Equal(t, charges.Authorized, f.charge(t, b).Status)

	_, err := f.pool.Exec(context.Background(), `UPDATE registry_postings SET status = 'annulled' WHERE payment_id = $1`, payment)
	require.NoError(t, err)
	f.clock.Advance(time.Minute)
	f.fake.Publish(f.fine("77УА123456", 1, 50000))
	f.pull(t)
	require.Equal(t, int64(50000), f.charge(t, f.bill(t, e, uin(1))).SourcePaid, "taken once rebill's payment cannot stand")
}

// A source and a registry that still disagree when the discount can no
// longer be had send the charge to review, with that reason, rather than
// to a hold at the full price: the discounted attempts before went on.
func TestFineItsSourceAndRegistryDisagreeAtTheLastDiscountedStartGoesToReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupFines(t)
	e := f.enrol(t, finesOf("cus_1", "77УА123456", 1000000))
	f.fake.Publish(f.fine("77УА123456", 1, 30000))
	require.Equal(t, 1, f.pull(t))
	f.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusDeclined, DeclineCode: "insufficient_funds"}, nil)
	c := f.authorize(t, f.charge(t, f.bill(t, e, uin(1))))
	discountEnds := *c.DiscountUntil
	for c.Status == charges.Declined {
		require.NotNil(t, c.NextAttemptAt)
		f.clock.Set(*c.NextAttemptAt)
		var retried []charges.Charge
		f.inTx(t, func(tx pgx.Tx) (err error) {
			retried, err = f.autopay.Charges.DueRetries(ctx, tx, f.clock.Now(), 10)
			return err
		})
		require.Len(t, retried, 1)
		c = f.authorize(t, retried[0])
	}

	require.Equal(t, charges.RequiresReview, c.Status)
	require.Contains(t, c.ReviewReason, "the bill source reports 30000, the registry holds 0")
	require.False(t, f.clock.Now().Before(discountEnds.Add(-charges.PostingDiscountMargin)), "sent to review at the last discounted start")
	amounts := f.authorizeAmounts()
	require.NotEmpty(t, amounts, "the discounted attempts went on")
	for _, a := range amounts {
		require.Equal(t, int64(50000), a, "nothing was held at the full price")
	}
	require.Equal(t, len(amounts)+1, f.registry.questions(), "the registry was asked before every attempt")
	require.Equal(t, enrollments.BillPaying, f.bill(t, e, uin(1)).Status)
}
