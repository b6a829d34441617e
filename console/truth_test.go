package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/puddle/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/velocity"
)

// renderTest renders a page template with data as a support session sees
// it and returns the HTML.
func renderTest(t *testing.T, name string, data any) string {
	t.Helper()
	h := &Handler{opts: Options{Logger: zerolog.Nop()}}
	s := session{idHash: []byte{1}, csrf: "csrf", key: apikeys.Key{ID: "key-1", Role: apikeys.Support}, loc: time.UTC}
	rec := httptest.NewRecorder()
	h.renderPage(rec, httptest.NewRequest(http.MethodGet, "/console/", nil), http.StatusOK, name,
		page{Title: "t", Session: &s, Data: data})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec.Body.String()
}

var (
	at      = time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	nextDay = at.AddDate(0, 1, 0)
)

func testSubscription(status subscriptions.Status) subscriptions.Subscription {
	return subscriptions.Subscription{ID: uuid.New(), CustomerID: "cust-1", Status: status, Amount: 1500, Currency: "USD",
		Interval: "month", IntervalCount: 1, TimeZone: "UTC", NextChargeAt: nextDay, CreatedAt: at, BillingAnchor: at}
}

// The subscription page offers what its status allows, and a paused one
// shows no next charge (the API's next_charge_at is null), only the day it
// resumes by itself.
func TestSubscriptionPageFitsItsState(t *testing.T) {
	t.Parallel()
	buttons := func(html string) []string {
		var out []string
		for _, label := range []string{">Pause</button>", ">Resume</button>", ">End trial now</button>", "Cancel now…",
			">Cancel at period end</button>"} {
			if strings.Contains(html, label) {
				out = append(out, label)
			}
		}
		return out
	}
	active := renderTest(t, "subscription", subscriptionData{Sub: testSubscription(subscriptions.Active)})
	require.Equal(t, []string{">Pause</button>", "Cancel now…", ">Cancel at period end</button>"}, buttons(active))
	require.Contains(t, active, `<dd id="next-charge"><time datetime="2027-04-01T09:00:00Z">`)
	require.Contains(t, active, `<input type="date" id="resume_at" name="resume_at"`)

	sub := testSubscription(subscriptions.Paused)
	resume := nextDay.AddDate(0, 1, 0)
	sub.PausedAt, sub.ResumeAt = &at, &resume
	paused := renderTest(t, "subscription", subscriptionData{Sub: sub})
	require.Equal(t, []string{">Resume</button>", "Cancel now…", ">Cancel at period end</button>"}, buttons(paused))
	require.Contains(t, paused, `<dd id="next-charge">none while paused</dd>`)
	require.NotContains(t, paused, "2027-04-01 09:00:00 UTC", "the date the schedule keeps is not a next charge")
	require.Contains(t, paused, `<dt>Resumes at</dt><dd><time datetime="2027-05-01T09:00:00Z">`)

	pastDue := renderTest(t, "subscription", subscriptionData{Sub: testSubscription(subscriptions.PastDue)})
	require.Equal(t, []string{"Cancel now…", ">Cancel at period end</button>"}, buttons(pastDue))

	ending := testSubscription(subscriptions.Active)
	ending.CancelAtPeriodEnd = true
	require.Equal(t, []string{">Pause</button>", "Cancel now…"}, buttons(renderTest(t, "subscription", subscriptionData{Sub: ending})))

	unpaid := renderTest(t, "subscription", subscriptionData{Sub: testSubscription(subscriptions.Unpaid)})
	require.Contains(t, unpaid, `<dd id="next-charge">none</dd>`)

	cancelled := renderTest(t, "subscription", subscriptionData{Sub: testSubscription(subscriptions.Cancelled)})
	require.Empty(t, buttons(cancelled))

	// A trial cannot be paused: only the cancels are offered, and the page
	// says when the trial ends and the first charge falls.
	trial := testSubscription(subscriptions.Trialing)
	trial.TrialEnd, trial.BillingAnchor, trial.NextChargeAt = &nextDay, nextDay, nextDay
	trialing := renderTest(t, "subscription", subscriptionData{Sub: trial})
	require.Equal(t, []string{">End trial now</button>", "Cancel now…", ">Cancel at period end</button>"}, buttons(trialing))
	require.Contains(t, trialing, `<dd id="status">trialing</dd>`)
	require.Contains(t, trialing, `<dt>Trial end</dt><dd id="trial-end"><time datetime="2027-04-01T09:00:00Z">`)
	require.Contains(t, trialing, `<dd id="next-charge"><time datetime="2027-04-01T09:00:00Z">`)
}

// Cancel now's second step says what it ends and looks destructive.
func TestCancelNowConfirmationPage(t *testing.T) {
	t.Parallel()
	html := renderTest(t, "cancel", testSubscription(subscriptions.Active))
	require.Contains(t, html, `<input type="hidden" name="at_period_end" value="false"><input type="hidden" name="confirmed" value="yes">`)
	require.Contains(t, html, `<button type="submit" class="danger">Yes, cancel now</button>`)
	require.Contains(t, html, "It cannot be undone.")
	require.NotContains(t, renderTest(t, "cancel", testSubscription(subscriptions.Cancelled)), "Yes, cancel now")
}

func testBill(status enrollments.BillStatus) enrollments.Bill {
	return enrollments.Bill{ID: uuid.New(), BillID: "B-" + string(status), Amount: 734500, Status: status, IssuedAt: at,
		PayAt: at, ExpiresAt: nextDay}
}

// A bill offers Confirm only while it awaits confirmation and nothing
// once settled; a paid_elsewhere bill says what was paid elsewhere; a
// housing enrollment shows no registry postings table, a fines one does.
func TestEnrollmentPageFitsItsBills(t *testing.T) {
	t.Parallel()
	enrollment := enrollments.Enrollment{ID: uuid.New(), CustomerID: "cust-1", Kind: enrollments.Housing, Currency: "RUB",
		MaxAmount: 100000, CreatedAt: at}
	forms := map[enrollments.BillStatus][]string{
		enrollments.BillAwaitingConfirmation: {"confirm", "withdraw"},
		enrollments.BillScheduled:            {"withdraw"},
		enrollments.BillPaying:               {"withdraw"},
		enrollments.BillFailed:               {"withdraw"},
		enrollments.BillPaid:                 nil,
		enrollments.BillPaidElsewhere:        nil,
		enrollments.BillWithdrawn:            nil,
		enrollments.BillExpired:              nil,
	}
	for status, want := range forms {
		b := testBill(status)
		html := renderTest(t, "enrollment", enrollmentData{Enrollment: enrollment, Bills: []billView{{Bill: b}}})
		var got []string
		for _, verb := range []string{"confirm", "withdraw"} {
			if strings.Contains(html, "/bills/"+b.BillID+"/"+verb+`"`) {
				got = append(got, verb)
			}
		}
		require.Equal(t, want, got, status)
		require.NotContains(t, html, "Registry posting", "a housing bill has no registry postings")
	}

	elsewhere := testBill(enrollments.BillPaidElsewhere)
	elsewhere.PaidOutside = 700000
	html := renderTest(t, "enrollment", enrollmentData{Enrollment: enrollment, Bills: []billView{{Bill: elsewhere}}})
	require.Contains(t, html, `<dt>Paid elsewhere</dt><dd class="paid-elsewhere">7000.00 RUB, outside rebill (as the bill's source reported)</dd>`)

	fines := enrollment
	fines.Kind = enrollments.Fines
	html = renderTest(t, "enrollment", enrollmentData{Enrollment: fines, Bills: []billView{{Bill: testBill(enrollments.BillPaying)}}})
	require.Contains(t, html, "Registry posting")
	require.Contains(t, html, "No registry posting yet.")
}

// Retry is offered only while no money of the charge may be live at the
// gateway; each Mark button sits in its own fieldset with its evidence
// box; the review columns say why in the code's sentence and what the
// look-up found in words.
func TestChargeActionsAndReviewInWords(t *testing.T) {
	t.Parallel()
	released := at
	base := charges.Charge{ID: uuid.New(), SubscriptionID: uuid.New(), CustomerID: "cust-1", PeriodKey: "2027-03-01", Amount: 1500,
		Currency: "USD", Gateway: "sim1", Status: charges.RequiresReview, AttemptCount: 1, CreatedAt: at, UpdatedAt: at,
		ReviewCode: charges.ReviewGatewayUnavailable, ReviewReason: charges.ReviewGatewayUnavailable.Sentence()}
	cases := []struct {
		name   string
		edit   func(*charges.Charge)
		retry  bool
		lookup string
	}{
		{"nothing recorded", func(*charges.Charge) {}, true, "Nothing: no hold or capture of this attempt was recorded."},
		{"a live hold", func(c *charges.Charge) { c.AuthorizationRef = "auth-77"; c.ReviewCode = charges.ReviewCaptureRefused },
			false, "A hold: the gateway holds this attempt's money under reference <bdi>auth-77</bdi>."},
		{"an unknown capture", func(c *charges.Charge) {
			c.UnknownOp = gateway.OpCapture
			c.ReviewCode = charges.ReviewOutcomeUnprovable
		},
			false, "Not known yet: rebill is still asking the gateway whether the capture went through."},
		{"hold released", func(c *charges.Charge) { c.AuthorizationRef = "auth-77"; c.HoldReleasedAt = &released },
			true, "No capture: the gateway holds none of this attempt's money"},
		{"resolved by a person", func(c *charges.Charge) { c.Status = charges.Failed; c.Resolved = true }, false, ""},
	}
	for _, tc := range cases {
		c := base
		tc.edit(&c)
		html := renderTest(t, "review", reviewData{Charges: []chargeView{{Charge: c}}})
		require.Equal(t, tc.retry, strings.Contains(html, ">Retry</button>"), tc.name)
		if tc.lookup != "" {
			require.Contains(t, html, tc.lookup, tc.name)
		}
		if c.Status == charges.RequiresReview {
			require.Contains(t, html, `<code>`+string(c.ReviewCode)+`</code>: `+template.HTMLEscapeString(c.ReviewCode.Sentence()), tc.name)
			for _, o := range outcomesList {
				require.Contains(t, html, `<fieldset class="action"><legend>`+o.Label+`</legend>`, tc.name)
			}
			// The button closes the fieldset that holds its evidence box.
			require.Regexp(t, `(?s)<legend>Mark succeeded</legend>[^/]*?name="outcome" value="succeeded">\s*<p><label for="evidence-succeeded-[^"]+">[^<]+</label>\s*<textarea[^>]+></textarea></p>\s*<p><button type="submit">Mark succeeded</button></p>\s*</fieldset>`, html)
			require.Regexp(t, `(?s)<legend>Mark failed</legend>.*?<textarea[^>]+></textarea></p>\s*<p><button type="submit">Mark failed</button></p>\s*</fieldset>`, html)
		}
	}
}

// Operations shows latencies in milliseconds and a gateway failing every
// call as failing, whatever its circuit says.
func TestOperationsGatewayHealth(t *testing.T) {
	t.Parallel()
	gws := []fleet.GatewayStatus{
		{Name: "sim1", Health: fleet.Health{Circuit: "closed", Calls: 10, ErrorRate: 0.1, P50: 1791138 * time.Nanosecond, P95: 2001183703 * time.Nanosecond}},
		{Name: "sim4", Health: fleet.Health{Circuit: "closed", Calls: 12, ErrorRate: 1, TimeoutRate: 0.5, P50: time.Second, P95: 2 * time.Second}},
		{Name: "sim5", Health: fleet.Health{Circuit: "closed"}},
	}
	html := renderTest(t, "operations", operationsData{Gateways: gws, Day: "2027-03-01"})
	require.Contains(t, html, `<td class="num">1.8 ms</td><td class="num">2001.2 ms</td>`)
	require.NotContains(t, html, "1.791138ms")
	require.Regexp(t, `(?s)<tr id="gateway-sim4">.*?<span class="status status-failing">failing</span><br><span class="hint">every one of its 12 calls in the window failed</span>`, html)
	require.Regexp(t, `(?s)<tr id="gateway-sim1">.*?<span class="status status-ok">ok</span>`, html)
	require.Regexp(t, `(?s)<tr id="gateway-sim5">.*?status-idle.*?<td class="num">—</td><td class="num">—</td>`, html)
}

// outcomesList is what the "outcomes" template function lists.
var outcomesList = funcs["outcomes"].(func() []outcome)()

// The search lists a paused subscription with no next charge, as its page
// and the API do.
func TestSearchShowsNoNextChargeWhilePaused(t *testing.T) {
	t.Parallel()
	paused := testSubscription(subscriptions.Paused)
	html := renderTest(t, "search", searchData{Query: "cust-1", Customer: "cust-1", CustomerHasAnything: true,
		Subscriptions: []subscriptions.Subscription{testSubscription(subscriptions.Active), paused}})
	require.Equal(t, 1, strings.Count(html, `<time datetime="2027-04-01T09:00:00Z">`), "only the active one has a next charge")
}

// An outage or a limit is not a 500 page: the console answers them with
// the API's status and Retry-After.
func TestUnavailableAndLimitedPages(t *testing.T) {
	t.Parallel()
	h := &Handler{opts: Options{Logger: zerolog.Nop()}}
	s := session{idHash: []byte{1}, csrf: "csrf", key: apikeys.Key{ID: "key-1", Role: apikeys.Support}, loc: time.UTC}
	for _, c := range []struct {
		err        error
		status     int
		retryAfter string
		says       string
	}{
		{fmt.Errorf("list: %w", puddle.ErrClosedPool), http.StatusServiceUnavailable, "1", "the database could not be reached"},
		{&velocity.ExceededError{Limit: velocity.Creations, Max: 3, RetryAfter: 90 * time.Second}, http.StatusTooManyRequests, "90",
			"Not done, over a limit: velocity limit creations"},
	} {
		rec := httptest.NewRecorder()
		h.fail(rec, httptest.NewRequest(http.MethodGet, "/console/review", nil), s, c.err)
		require.Equal(t, c.status, rec.Code)
		require.Equal(t, c.retryAfter, rec.Header().Get("Retry-After"))
		require.Contains(t, rec.Body.String(), c.says)
	}
}

// Change is offered on every subscription that is not cancelled, Remove
// pending change only while a change waits; the pending change says what
// it changes and from when.
func TestSubscriptionPageShowsItsPendingChange(t *testing.T) {
	t.Parallel()
	active := renderTest(t, "subscription", subscriptionData{Sub: testSubscription(subscriptions.Active)})
	require.Contains(t, active, "<legend>Change</legend>")
	require.NotContains(t, active, ">Remove pending change</button>")
	require.NotContains(t, active, `id="pending-update"`)

	count, amount := 3, int64(900)
	sub := testSubscription(subscriptions.PastDue)
	sub.PendingUpdate = &subscriptions.PendingUpdate{ID: uuid.New(), Amount: &amount, IntervalCount: &count, EffectiveAt: nextDay}
	sub.CreditBalance = 1
	pending := renderTest(t, "subscription", subscriptionData{Sub: sub})
	require.Contains(t, pending, "<legend>Change</legend>")
	require.Contains(t, pending, ">Remove pending change</button>")
	require.Contains(t, pending, `<dd id="pending-update">From <time datetime="2027-04-01T09:00:00Z">`)
	require.Contains(t, pending, "amount 15.00 USD → 9.00 USD; every 1 month → every 3 month</dd>")
	require.Contains(t, pending, `<dd id="credit-balance">0.01 USD</dd>`)

	sub.Status = subscriptions.Cancelled
	cancelled := renderTest(t, "subscription", subscriptionData{Sub: sub})
	require.NotContains(t, cancelled, "<legend>Change</legend>")
	require.NotContains(t, cancelled, ">Remove pending change</button>")
}
