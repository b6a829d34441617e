package autopay_test

// The pull of bill sources, over a real database, against the fake source
// read through the HTTP client: the cursor, the trailing re-read, new
// enrollments read from the start, batches and failures.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/autopay/billsource/testkit/conformance"
	"github.com/rebill/rebill/autopay/billsource/testkit/sourcefake"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
)

// sourceBundle is autopay pulling fines from a fake source.
type sourceBundle struct {
	*testBundle
	fake *sourcefake.Source
	name string
}

func setupSource(t *testing.T, window time.Duration, batch int) *sourceBundle {
	t.Helper()
	b := setup(t)
	fake := sourcefake.New("")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	name := "fake-" + t.Name()
	metrics.ZeroBillSource(name, time.Hour)
	client := billsource.New(billsource.Config{Name: name, BaseURL: srv.URL,
		Timeout: 2 * time.Second, BatchSize: batch, RateLimit: 1000, RereadWindow: window, MaxTries: 2,
		Backoff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }})
	b.autopay.Sources = map[enrollments.Kind]autopay.BillSource{enrollments.Fines: client}
	return &sourceBundle{testBundle: b, fake: fake, name: name}
}

// fineOf is fine n of the vehicle sts, as the source publishes it.
func (s *sourceBundle) fineOf(sts string, n int) billsource.Bill {
	deadline, discounted := "2027-03-20", int64(50000)
	return billsource.Bill{BillID: uin(n), Account: billsource.Account{STS: sts}, Amount: 100000,
		DiscountedAmount: &discounted, DiscountDeadline: &deadline, IssuedAt: start, DueDate: "2027-05-09"}
}

func (s *sourceBundle) pull(t *testing.T) int {
	t.Helper()
	n, err := s.autopay.Pull(context.Background())
	require.NoError(t, err)
	return n
}

func (s *sourceBundle) cursor(t *testing.T) int64 {
	t.Helper()
	var c int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT cursor FROM bill_source_cursors WHERE source = $1`,
		s.name).Scan(&c))
	return c
}

// billIDs lists the enrollment's bills' ids.
func (s *sourceBundle) billIDs(t *testing.T, e enrollments.Enrollment) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT bill_id FROM bills WHERE enrollment_id = $1 ORDER BY bill_id`, e.ID)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// lastAfter is the after_sequence of the last request the fake received.
func (s *sourceBundle) lastAfter(t *testing.T) int64 {
	t.Helper()
	reqs := s.fake.Requests()
	require.NotEmpty(t, reqs)
	return reqs[len(reqs)-1].Query.AfterSequence
}

// The simulated source of dev mode behaves as every source must.
func TestDevSourceConforms(t *testing.T) {
	t.Parallel()
	for _, kind := range []enrollments.Kind{enrollments.Housing, enrollments.Fines} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, func(t *testing.T) conformance.Harness {
				src := autopay.DevSource{Pool: dbtest.Pool(t), Kind: kind}
				return conformance.Harness{Source: src, Kind: kind, Publish: func(t *testing.T, sb autopay.SourcedBill) {
					require.NoError(t, pgx.BeginFunc(context.Background(), src.Pool, func(tx pgx.Tx) error {
						_, err := src.Publish(context.Background(), tx, sb, start)
						return err
					}))
				}}
			})
		})
	}
}

// Bills published before the enrollment are read (from sequence 0), a
// duplicate publication is one bill, and pulling again creates nothing.
func TestPullStoresEachSourcedBillOnce(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	e := s.enrol(t, finesOf("cus_1", "77УА000001", 500000))
	s.fake.Publish(s.fineOf("77УА000001", 1))
	s.fake.Publish(s.fineOf("77УА000001", 2))
	s.fake.Publish(s.fineOf("77УА000001", 1))
	s.fake.Publish(s.fineOf("77УА000099", 3))
	require.Equal(t, 2, s.pull(t))
	require.Equal(t, []string{uin(1), uin(2)}, s.billIDs(t, e))
	require.Equal(t, int64(4), s.cursor(t))
	require.Equal(t, 0, s.pull(t), "the second pull re-reads the window: nothing new")
	require.Equal(t, []string{uin(1), uin(2)}, s.billIDs(t, e))
	require.Equal(t, 2, s.charges(t), "one charge per bill")
	require.Equal(t, []string{"received"}, s.events.of(uin(1)))
	require.Equal(t, float64(6), testutil.ToFloat64(metrics.BillSourceBills.WithLabelValues(s.name)), "3 bills read, twice")
}

// A pull that fails after its first page keeps that page's bills but not
// its cursor; the next pull reads on.
func TestFailedPullKeepsItsCursor(t *testing.T) {
	t.Parallel()
	s := setupSource(t, 0, 4)
	e := s.enrol(t, finesOf("cus_1", "77УА000001", 500000))
	s.fake.Publish(s.fineOf("77УА000001", 1))
	s.pull(t)
	require.Equal(t, int64(1), s.cursor(t))

	for n := 2; n <= 6; n++ {
		s.fake.Publish(s.fineOf("77УА000001", n))
	}
	s.fake.Inject(sourcefake.Fault{}, sourcefake.Fault{Status: http.StatusServiceUnavailable},
		sourcefake.Fault{Status: http.StatusServiceUnavailable})
	s.clock.Advance(time.Minute)
	_, err := s.autopay.Pull(context.Background())
	require.ErrorContains(t, err, "pull bill source "+s.name)
	require.ErrorContains(t, err, "503")
	require.Equal(t, int64(1), s.cursor(t), "the cursor stays")
	require.Equal(t, []string{uin(1), uin(2), uin(3), uin(4), uin(5)}, s.billIDs(t, e), "the first page's bills are stored")
	require.Equal(t, float64(1), testutil.ToFloat64(metrics.BillSourceErrors.WithLabelValues(s.name)))

	s.clock.Advance(time.Minute)
	before := len(s.fake.Requests())
	require.Equal(t, 1, s.pull(t))
	require.Equal(t, int64(1), s.fake.Requests()[before].Query.AfterSequence, "read again from the kept cursor")
	require.Equal(t, int64(6), s.cursor(t))
	require.Equal(t, []string{uin(1), uin(2), uin(3), uin(4), uin(5), uin(6)}, s.billIDs(t, e))
}

// A bill whose sequence was taken before a later bill's, but that became
// visible only after the cursor had passed both, is read by the trailing
// re-read (window 1h) and missed without one (window 0); bills re-read
// create nothing.
func TestRereadWindowFindsALateBill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window time.Duration
		found  bool
	}{{time.Hour, true}, {0, false}} {
		t.Run(tc.window.String(), func(t *testing.T) {
			t.Parallel()
			s := setupSource(t, tc.window, 50)
			e := s.enrol(t, finesOf("cus_1", "77УА000001", 500000))
			s.fake.Publish(s.fineOf("77УА000001", 1))
			s.pull(t) // the enrollment is read from 0: cursor 1
			s.clock.Advance(2 * time.Hour)
			s.pull(t) // the cursor at 1 is an hour old

			late := s.fake.Reserve()
			s.fake.Publish(s.fineOf("77УА000001", 3))
			s.clock.Advance(time.Minute)
			require.Equal(t, 1, s.pull(t))
			require.Equal(t, int64(3), s.cursor(t), "the cursor passed the invisible sequence 2")

			s.fake.Commit(late, s.fineOf("77УА000001", 2))
			s.clock.Advance(30 * time.Minute)
			created := s.pull(t)
			if !tc.found {
				require.Equal(t, 0, created)
				require.Equal(t, int64(3), s.lastAfter(t), "no re-read: from the cursor")
				require.Equal(t, []string{uin(1), uin(3)}, s.billIDs(t, e))
				return
			}
			require.Equal(t, int64(1), s.lastAfter(t), "from the cursor current an hour ago")
			require.Equal(t, 1, created, "the late bill only: the re-read bill 3 is a no-op")
			require.Equal(t, []string{uin(1), uin(2), uin(3)}, s.billIDs(t, e))
			require.Equal(t, []string{"received"}, s.events.of(uin(3)))
			require.Equal(t, 3, s.charges(t))
		})
	}
}

// An enrollment created after its account's bills were published (and
// after the cursor passed them) gets them: it is read from sequence 0
// once, then from the window like the others.
func TestNewEnrollmentGetsExistingBills(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	s.enrol(t, finesOf("cus_1", "77УА000001", 500000))
	s.fake.Publish(s.fineOf("77УА000002", 7))
	s.pull(t)
	s.clock.Advance(2 * time.Hour)
	s.pull(t)
	s.clock.Advance(2 * time.Hour)
	require.Equal(t, 0, s.pull(t))
	require.Equal(t, int64(1), s.cursor(t))

	e := s.enrol(t, finesOf("cus_2", "77УА000002", 500000))
	before := len(s.fake.Requests())
	require.Equal(t, 1, s.pull(t))
	require.Equal(t, []string{uin(7)}, s.billIDs(t, e))
	var fresh []billsource.QueryRequest
	for _, r := range s.fake.Requests()[before:] {
		if r.Query.AfterSequence == 0 {
			fresh = append(fresh, r.Query)
		}
	}
	require.Equal(t, []billsource.QueryRequest{{Accounts: []billsource.Account{{STS: "77УА000002"}, {STS: "77YA000002"}},
		AfterSequence: 0, Limit: 50}}, fresh, "only the new enrollment is read from 0, in both spellings")

	before = len(s.fake.Requests())
	s.clock.Advance(2 * time.Hour)
	require.Equal(t, 0, s.pull(t))
	for _, r := range s.fake.Requests()[before:] {
		require.Equal(t, int64(1), r.Query.AfterSequence, "read once from 0, then from the window")
	}
}

// A bill pulled twice and pushed once through the API is one bill with
// one charge.
func TestPulledTwicePushedOnceIsOneBill(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	e := s.enrol(t, finesOf("cus_1", "77УА000001", 500000))
	s.fake.Publish(s.fineOf("77УА000001", 1))
	require.Equal(t, 1, s.pull(t))
	pushed, created, err := s.push(t, e, fine(t, uin(1), 100000, 50000, "2027-03-20", "2027-05-09"))
	require.NoError(t, err)
	require.False(t, created, "the pushed bill is the pulled one")
	s.clock.Advance(time.Minute)
	require.Equal(t, 0, s.pull(t))
	require.Equal(t, []string{uin(1)}, s.billIDs(t, e))
	require.Equal(t, pushed.ID, s.bill(t, e, uin(1)).ID)
	require.Equal(t, 1, s.charges(t))
}

// Accounts and bills both come in batches: with a batch of 4, five
// STSs, each asked about in its Cyrillic and its Latin spelling, are asked
// about four at a time (an enrollment's two in one request), in pages of
// at most four bills, and every bill arrives. A batch set lower is read as
// 4, so that a fines enrollment's STS and licence, in both spellings, fit
// one request.
func TestPullBatchesAccountsAndPages(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{2, 4} {
		s := setupSource(t, time.Hour, batch)
		var enrolled []enrollments.Enrollment
		for a := 1; a <= 5; a++ {
			sts := fmt.Sprintf("77УА%06d", a)
			enrolled = append(enrolled, s.enrol(t, finesOf(fmt.Sprintf("cus_%d", a), sts, 500000)))
			for n := range 3 {
				s.fake.Publish(s.fineOf(sts, a*10+n))
			}
		}
		require.Equal(t, 15, s.pull(t))
		for i, e := range enrolled {
			a := i + 1
			require.Equal(t, []string{uin(a * 10), uin(a*10 + 1), uin(a*10 + 2)}, s.billIDs(t, e))
		}
		accounts := map[string]bool{}
		for _, r := range s.fake.Requests() {
			require.LessOrEqual(t, len(r.Query.Accounts), 4)
			require.Equal(t, 4, r.Query.Limit)
			require.LessOrEqual(t, r.Bills, 4)
			for _, a := range r.Query.Accounts {
				accounts[a.STS] = true
			}
		}
		require.Len(t, accounts, 10, "each STS in both spellings: %v", accounts)
		require.True(t, accounts["77YA000003"], "%v", accounts)
		require.Equal(t, int64(15), s.cursor(t))
	}
}

// With no enrollment the source is still asked (for its head): its
// silence is measured, and the cursor moves.
func TestPullWithoutAccountsAsksForTheHead(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	s.fake.Publish(s.fineOf("77УА000001", 1))
	require.Equal(t, 0, s.pull(t))
	reqs := s.fake.Requests()
	require.Len(t, reqs, 1)
	require.Empty(t, reqs[0].Query.Accounts)
	require.Equal(t, int64(1), s.cursor(t))
	require.Positive(t, testutil.ToFloat64(metrics.BillSourceLastSuccess.WithLabelValues(s.name)))
}

// A vehicle's STS has one spelling at rebill, its letters in Cyrillic, but
// a source may file its fines under the Latin look-alikes someone typed:
// the pull asks for both spellings, and a fine filed under either reaches
// the enrollment, once; so does a fine filed under the licence in Latin.
func TestFinesFiledUnderLatinSpellingReachTheEnrollment(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	e := s.enrol(t, enrolment{customer: "cus_latin", kind: enrollments.Fines, maxAmount: 500000,
		ref: enrollments.AccountRef{STS: "77УА123456", DriverLicense: "77АВ654321"}})
	s.fake.Publish(s.fineOf("77YA123456", 1))
	s.fake.Publish(s.fineOf("77УА123456", 2))
	byLicence := s.fineOf("", 3)
	byLicence.Account = billsource.Account{DriverLicense: "77AB654321"}
	s.fake.Publish(byLicence)
	s.fake.Publish(s.fineOf("77YA123457", 4)) // another car
	require.Equal(t, 3, s.pull(t))
	require.Equal(t, []string{uin(1), uin(2), uin(3)}, s.billIDs(t, e))
	s.clock.Advance(time.Minute)
	require.Equal(t, 0, s.pull(t), "read again, stored once")
}

// A pulled bill that can no longer be paid (a fine past both its due
// date and 60 days after its ruling) is not skipped: it is stored
// expired, as a pushed one is, and never charged; one still payable after
// its due date (within the 60 days) is charged (docs/bill-sources.md).
func TestPulledBillPastItsLastMomentIsStoredExpired(t *testing.T) {
	t.Parallel()
	s := setupSource(t, time.Hour, 50)
	e := s.enrol(t, finesOf("cus_1", "77УА000002", 500000))
	late := s.fineOf("77УА000002", 4)
	late.IssuedAt, late.DueDate, late.DiscountedAmount, late.DiscountDeadline = start.AddDate(0, 0, -(enrollments.FineExpiryDays+1)),
		start.AddDate(0, 0, -10).Format(time.DateOnly), nil, nil
	s.fake.Publish(late)
	require.Equal(t, 1, s.pull(t))
	require.Equal(t, []string{uin(4)}, s.billIDs(t, e), "stored, not skipped")
	var status string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT status FROM bills WHERE enrollment_id = $1`, e.ID).Scan(&status))
	require.Equal(t, string(enrollments.BillExpired), status)
	require.Equal(t, 0, s.charges(t), "never charged")
	require.Equal(t, []string{"received", "expired"}, s.events.of(uin(4)))

	payable := s.fineOf("77УА000002", 5)
	payable.IssuedAt, payable.DueDate, payable.DiscountedAmount, payable.DiscountDeadline = start.AddDate(0, 0, -20),
		start.AddDate(0, 0, -10).Format(time.DateOnly), nil, nil
	s.fake.Publish(payable)
	require.Equal(t, 1, s.pull(t))
	require.Equal(t, 1, s.charges(t), "a fine past its due date within 60 days of its ruling is still charged")
}
