package autopay_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// start is 2027-03-01 12:00 in Moscow, whose days bills are due on.
var start = time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)

// dunning is the production default: its span (7 days) is the room a
// housing bill's pay day must leave before the due date.
var dunning = []time.Duration{24 * time.Hour, 72 * time.Hour, 120 * time.Hour, 168 * time.Hour}

const captureMargin = time.Hour

// testBundle is autopay on a fresh database with a River client that only
// inserts: tests assert on the bills, the charges and the jobs enqueued,
// and run what a worker would by calling autopay directly.
type testBundle struct {
	pool     *pgxpool.Pool
	clock    *testsupport.Clock
	driver   *riverpgxv5.Driver
	autopay  *autopay.Autopay
	outcomes autopay.Outcomes
	events   *recordedEvents
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(start)
	store := enrollments.NewStore(clk)
	events := &recordedEvents{}
	store.SetEventSink(events)
	driver := riverpgxv5.New(pool)
	client, err := river.NewClient(driver, &river.Config{Logger: slog.New(slog.DiscardHandler), TestOnly: true,
		Test: river.TestConfig{Time: clk}})
	require.NoError(t, err)
	rules := enrollments.Rules{Dunning: dunning, CaptureMargin: captureMargin}
	return &testBundle{
		pool:   pool,
		clock:  clk,
		driver: driver,
		autopay: &autopay.Autopay{Pool: pool, Enrollments: store, Clock: clk, Rules: rules, Charges: &charges.Store{Queue: client},
			BatchSize: 2, Registry: true, Logger: zerolog.Nop()},
		outcomes: autopay.Outcomes{Enrollments: store, Rules: rules},
		events:   events,
	}
}

// recordedEvents keeps the bill events the store publishes, as
// "<type> <bill_id>".
type recordedEvents struct {
	mu   sync.Mutex
	list []string
}

func (r *recordedEvents) EnrollmentChanged(context.Context, pgx.Tx, string, enrollments.Enrollment, time.Time) error {
	return nil
}

func (r *recordedEvents) BillChanged(_ context.Context, _ pgx.Tx, typ string, b enrollments.Bill, _ time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, typ+" "+b.BillID)
	return nil
}

func (r *recordedEvents) BillStored(context.Context, pgx.Tx, enrollments.Bill, time.Time) error {
	return nil
}

func (r *recordedEvents) of(billID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.list {
		if len(e) > len(billID) && e[len(e)-len(billID):] == billID {
			out = append(out, e[:len(e)-len(billID)-1])
		}
	}
	return out
}

// uin is a valid fine UIN numbered n.
func uin(n int) string {
	body := fmt.Sprintf("188%016d", n)
	return body + fmt.Sprint(enrollments.UINCheckDigit(body))
}

func date(t *testing.T, s string) enrollments.Date {
	t.Helper()
	d, err := enrollments.ParseDate(s)
	require.NoError(t, err)
	return d
}

// fine is a fine issued at start, its discount running until deadline.
func fine(t *testing.T, id string, amount, discounted int64, deadline, due string) enrollments.BillInput {
	dl := date(t, deadline)
	return enrollments.BillInput{BillID: id, Amount: amount, IssuedAt: start, DueDate: date(t, due),
		DiscountDeadline: &dl, DiscountedAmount: &discounted}
}

// housing is a housing bill issued at start.
func housing(t *testing.T, id string, amount int64, due string) enrollments.BillInput {
	return enrollments.BillInput{BillID: id, Amount: amount, IssuedAt: start, DueDate: date(t, due)}
}

type enrolment struct {
	customer  string
	kind      enrollments.Kind
	ref       enrollments.AccountRef
	maxAmount int64
	payDay    int
}

func housingOf(customer, els string, payDay int, maxAmount int64) enrolment {
	return enrolment{customer: customer, kind: enrollments.Housing, ref: enrollments.AccountRef{ELS: els},
		maxAmount: maxAmount, payDay: payDay}
}

func finesOf(customer, sts string, maxAmount int64) enrolment {
	return enrolment{customer: customer, kind: enrollments.Fines, ref: enrollments.AccountRef{STS: sts}, maxAmount: maxAmount}
}

func (b *testBundle) enrol(t *testing.T, n enrolment) enrollments.Enrollment {
	t.Helper()
	var e enrollments.Enrollment
	b.inTx(t, func(tx pgx.Tx) (err error) {
		e, err = b.autopay.Enrollments.Create(context.Background(), tx, enrollments.New{CustomerID: n.customer, Kind: n.kind,
			AccountRef: n.ref, Currency: "RUB", MaxAmount: n.maxAmount, PayDay: n.payDay,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_" + n.customer, ExpMonth: 12, ExpYear: 2035}})
		return err
	})
	return e
}

// inTx runs fn in a transaction that commits when fn returns nil.
func (b *testBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, fn))
}

// push pushes in to e, committed; returns the bill, whether it was new,
// and the push's error (nothing is committed then).
func (b *testBundle) push(t *testing.T, e enrollments.Enrollment, in enrollments.BillInput) (enrollments.Bill, bool, error) {
	t.Helper()
	var bill enrollments.Bill
	var created bool
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		bill, created, err = b.autopay.Push(context.Background(), tx, e.ID, in)
		return err
	})
	return bill, created, err
}

func (b *testBundle) mustPush(t *testing.T, e enrollments.Enrollment, in enrollments.BillInput) enrollments.Bill {
	t.Helper()
	bill, created, err := b.push(t, e, in)
	require.NoError(t, err)
	require.True(t, created)
	return bill
}

func (b *testBundle) bill(t *testing.T, e enrollments.Enrollment, billID string) enrollments.Bill {
	t.Helper()
	bill, err := b.autopay.Enrollments.GetBill(context.Background(), b.pool, e.ID, billID)
	require.NoError(t, err)
	return bill
}

func (b *testBundle) charge(t *testing.T, bill enrollments.Bill) charges.Charge {
	t.Helper()
	require.NotNil(t, bill.ChargeID, "bill %s has a charge", bill.BillID)
	c, err := charges.Get(context.Background(), b.pool, *bill.ChargeID)
	require.NoError(t, err)
	return c
}

// charges counts the charges of bills.
func (b *testBundle) charges(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n))
	return n
}

// authorizeJobs lists the charges whose authorize jobs were enqueued, in
// order.
func (b *testBundle) authorizeJobs(t *testing.T) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT (args->>'charge_id')::uuid FROM river_job
		WHERE kind = 'charge_authorize' ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

// scan runs a whole bill scan at the clock's now.
func (b *testBundle) scan(t *testing.T) autopay.ScanResult {
	t.Helper()
	res, err := b.autopay.Scan(context.Background(), b.clock.Now())
	require.NoError(t, err)
	return res
}
