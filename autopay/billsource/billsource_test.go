package billsource_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/autopay/billsource/testkit/conformance"
	"github.com/rebill/rebill/autopay/billsource/testkit/sourcefake"
	"github.com/rebill/rebill/enrollments"
)

const token = "fake-token-7c1d"

// testBundle is a fake source behind an httptest server and the client
// that reads it.
type testBundle struct {
	fake   *sourcefake.Source
	client *billsource.Client
}

func setup(t *testing.T, kind enrollments.Kind, tweak func(*billsource.Config)) *testBundle {
	t.Helper()
	fake := sourcefake.New(token)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := billsource.Config{Name: "fake", BaseURL: srv.URL, Token: token, Timeout: 2 * time.Second,
		BatchSize: 50, RateLimit: 1000, RereadWindow: time.Hour,
		Backoff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }}
	if tweak != nil {
		tweak(&cfg)
	}
	return &testBundle{fake: fake, client: billsource.New(cfg)}
}

// wire is a SourcedBill as the fake publishes it.
func wire(sb autopay.SourcedBill) billsource.Bill {
	b := billsource.Bill{BillID: sb.Bill.BillID, Account: billsource.Account{ELS: sb.Account.ELS, STS: sb.Account.STS,
		DriverLicense: sb.Account.DriverLicense}, Amount: sb.Bill.Amount, DiscountedAmount: sb.Bill.DiscountedAmount,
		IssuedAt: sb.Bill.IssuedAt, DueDate: sb.Bill.DueDate.String(), PaidAmount: sb.PaidOutside}
	if sb.Bill.DiscountDeadline != nil {
		d := sb.Bill.DiscountDeadline.String()
		b.DiscountDeadline = &d
	}
	return b
}

// The fake, read through the client, behaves as every source must.
func TestFakeThroughClientConforms(t *testing.T) {
	t.Parallel()
	for _, kind := range []enrollments.Kind{enrollments.Housing, enrollments.Fines} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, func(t *testing.T) conformance.Harness {
				b := setup(t, kind, nil)
				return conformance.Harness{Source: b.client, Kind: kind,
					Publish: func(_ *testing.T, sb autopay.SourcedBill) { b.fake.Publish(wire(sb)) }}
			})
		})
	}
}

var els = enrollments.AccountRef{ELS: "75КА533315"}

func housingBill(id string) billsource.Bill {
	return billsource.Bill{BillID: id, Account: billsource.Account{ELS: els.ELS}, Amount: 150000,
		IssuedAt: time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC), DueDate: "2027-03-25", PaidAmount: 20000}
}

func pull(ctx context.Context, c *billsource.Client, after int64) (autopay.Page, error) {
	return c.Pull(ctx, autopay.PullRequest{Accounts: []enrollments.AccountRef{els}, After: after, Limit: 10})
}

// 503, a stall past the timeout and a 429 are each tried again; the page
// then comes, paid_amount as PaidOutside.
func TestTransientFaultsAreRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, enrollments.Housing, func(c *billsource.Config) { c.Timeout = 100 * time.Millisecond })
	b.fake.Publish(housingBill("H-1"))
	b.fake.Inject(sourcefake.Fault{Status: http.StatusServiceUnavailable}, sourcefake.Fault{Stall: 5 * time.Second},
		sourcefake.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0"}, sourcefake.Fault{Status: http.StatusBadGateway})
	page, err := pull(context.Background(), b.client, 0)
	require.NoError(t, err)
	require.Len(t, page.Bills, 1)
	require.Equal(t, int64(20000), page.Bills[0].PaidOutside)
	statuses := []int{}
	for _, r := range b.fake.Requests() {
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, []int{503, 0, 429, 502, 200}, statuses, "0: the stalled request, abandoned at the timeout")
}

// Tries are bounded: a source down for good fails the page with its last
// status.
func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, enrollments.Housing, func(c *billsource.Config) { c.MaxTries = 3 })
	for range 5 {
		b.fake.Inject(sourcefake.Fault{Status: http.StatusInternalServerError})
	}
	_, err := pull(context.Background(), b.client, 0)
	var status *billsource.StatusError
	require.ErrorAs(t, err, &status)
	require.Equal(t, http.StatusInternalServerError, status.Status)
	require.Len(t, b.fake.Requests(), 3)
}

// A refusal (401, 400) is not tried again, and the token is not in the
// error.
func TestRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, enrollments.Housing, func(c *billsource.Config) { c.Token = "wrong-token-secret" })
	_, err := pull(context.Background(), b.client, 0)
	var status *billsource.StatusError
	require.ErrorAs(t, err, &status)
	require.Equal(t, http.StatusUnauthorized, status.Status)
	require.NotContains(t, err.Error(), "wrong-token-secret")
	require.Len(t, b.fake.Requests(), 1)
}

// Every request, retries included, takes a token of the rate limiter: on
// a virtual clock, 21 requests at 5 per second take at least 4 s, however
// fast the source answers.
func TestRateLimitIsHonoured(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	start := now
	b := setup(t, enrollments.Housing, func(c *billsource.Config) {
		c.RateLimit = 5
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		c.Sleep = func(_ context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			return nil
		}
	})
	for i := range 20 {
		b.fake.Publish(housingBill("H-" + string(rune('a'+i))))
	}
	b.fake.Inject(sourcefake.Fault{Status: http.StatusServiceUnavailable})
	after := int64(0)
	for {
		page, err := b.client.Pull(context.Background(),
			autopay.PullRequest{Accounts: []enrollments.AccountRef{els}, After: after, Limit: 1})
		require.NoError(t, err)
		after = page.Next
		if !page.HasMore {
			break
		}
	}
	calls := len(b.fake.Requests())
	require.Equal(t, 21, calls, "20 pages of one bill (the last says no more) and one retry")
	elapsed := now.Sub(start)
	require.GreaterOrEqual(t, elapsed, time.Duration(calls-1)*200*time.Millisecond,
		"the first call is free (burst 1), each next one waits 1/5 s")
	require.Less(t, elapsed, time.Duration(calls)*200*time.Millisecond, "and no longer")
}

// Pages are bounded by the limit and follow next_sequence.
func TestPaginationFollowsNextSequence(t *testing.T) {
	t.Parallel()
	b := setup(t, enrollments.Housing, nil)
	for _, id := range []string{"H-1", "H-2", "H-3", "H-4", "H-5"} {
		b.fake.Publish(housingBill(id))
	}
	var got []string
	after := int64(0)
	for {
		page, err := b.client.Pull(context.Background(),
			autopay.PullRequest{Accounts: []enrollments.AccountRef{els}, After: after, Limit: 2})
		require.NoError(t, err)
		for _, sb := range page.Bills {
			got = append(got, sb.Bill.BillID)
		}
		after = page.Next
		if !page.HasMore {
			break
		}
	}
	require.Equal(t, []string{"H-1", "H-2", "H-3", "H-4", "H-5"}, got)
	for _, r := range b.fake.Requests() {
		require.Equal(t, 2, r.Query.Limit)
		require.LessOrEqual(t, r.Bills, 2)
	}
	require.Len(t, b.fake.Requests(), 3)
}

// A bill that cannot be read is reported apart; the others come.
func TestUnreadableBillIsSetApart(t *testing.T) {
	t.Parallel()
	b := setup(t, enrollments.Housing, nil)
	bad := housingBill("H-bad")
	bad.DueDate = "25.03.2027"
	b.fake.Publish(bad)
	b.fake.Publish(housingBill("H-good"))
	page, err := pull(context.Background(), b.client, 0)
	require.NoError(t, err)
	require.Len(t, page.Bills, 1)
	require.Equal(t, "H-good", page.Bills[0].Bill.BillID)
	require.Len(t, page.Invalid, 1)
	require.Equal(t, "H-bad", page.Invalid[0].BillID)
	require.ErrorContains(t, page.Invalid[0].Err, "due_date")
}

// Answers that break the protocol fail the page, untried again.
func TestProtocolViolationsFail(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"out of order":      `{"bills":[{"sequence":5,"bill_id":"a","account":{"els":"75КА533315"},"amount":1,"issued_at":"2027-03-01T00:00:00Z","due_date":"2027-03-25"},{"sequence":4,"bill_id":"b","account":{"els":"75КА533315"},"amount":1,"issued_at":"2027-03-01T00:00:00Z","due_date":"2027-03-25"}],"has_more":false,"next_sequence":5}`,
		"no progress":       `{"bills":[],"has_more":true,"next_sequence":0}`,
		"next below":        `{"bills":[{"sequence":5,"bill_id":"a","account":{"els":"75КА533315"},"amount":1,"issued_at":"2027-03-01T00:00:00Z","due_date":"2027-03-25"}],"has_more":false,"next_sequence":3}`,
		"at or below after": `{"bills":[{"sequence":0,"bill_id":"a","account":{"els":"75КА533315"},"amount":1,"issued_at":"2027-03-01T00:00:00Z","due_date":"2027-03-25"}],"has_more":false,"next_sequence":3}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				_, _ = w.Write([]byte(body))
			}))
			t.Cleanup(srv.Close)
			c := billsource.New(billsource.Config{Name: "x", BaseURL: srv.URL, Timeout: time.Second, BatchSize: 10, RateLimit: 100})
			_, err := pull(context.Background(), c, 0)
			require.True(t, errors.Is(err, billsource.ErrProtocol), "%v", err)
			require.Equal(t, int32(1), calls.Load())
		})
	}
}
