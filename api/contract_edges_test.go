package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/reports"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/usecases"
	"github.com/rebill/rebill/velocity"
)

// httpSeries returns the lines of /metrics that belong to the request
// metrics.
func httpSeries(t *testing.T, b testBundle) []string {
	t.Helper()
	res := b.do(t, http.MethodGet, "/metrics", "", "", "")
	require.Equal(t, http.StatusOK, res.status)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(res.body))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "rebill_http_") {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Anyone can send any method to any path without a key; none of it may
// become a label value, or /metrics (and every Prometheus that scrapes it)
// grows without bound. Not parallel: it counts the process's series.
func TestMetricsLabelsComeFromClosedSets(t *testing.T) {
	b := setup(t)
	before := httpSeries(t, b)
	rng := rand.New(rand.NewPCG(19, 1))
	known := []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"}
	for i := 0; i < 1000; i++ {
		method := fmt.Sprintf("M%d", rng.IntN(1_000_000))
		if i%5 == 0 { // a known method in another case is another method
			method = strings.ToLower(known[rng.IntN(len(known))])
		}
		path := fmt.Sprintf("/x%d/%d", rng.IntN(1_000_000), i)
		switch i % 3 {
		case 1:
			path = "/v1/subscriptions" // exists: a made-up method is 405 there
		case 2:
			path = fmt.Sprintf("/v1/subscriptions/%d/%d", rng.IntN(1_000_000), i)
		}
		req, err := http.NewRequest(method, b.server.URL+path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Less(t, res.StatusCode, 500)
	}
	after := httpSeries(t, b)
	// Method "other", route unmatched or /v1/subscriptions, status 404 or
	// 405: four series at most, of 16 lines (a counter and a histogram of
	// 12 buckets, +Inf, sum and count).
	require.LessOrEqual(t, len(after)-len(before), 4*16, "the request metrics grew with the input")

	methodLabel := regexp.MustCompile(`method="([^"]*)"`)
	allowed := map[string]bool{"other": true}
	for _, m := range known {
		allowed[m] = true
	}
	for _, line := range after {
		if m := methodLabel.FindStringSubmatch(line); m != nil {
			require.True(t, allowed[m[1]], "method label %q is not from the fixed set", m[1])
		}
		require.NotRegexp(t, `route="/x`, line, "an unmatched path became a route label")
	}
}

// billsAutopay records the bill ids the bill routes are called with; every
// bill is unknown to it.
type billsAutopay struct {
	api.Autopay
	mu  sync.Mutex
	got []string
}

func (a *billsAutopay) ConfirmBill(_ context.Context, _ pgx.Tx, _ usecases.Caller, _ uuid.UUID, billID string) (enrollments.Bill, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, billID)
	return enrollments.Bill{}, enrollments.ErrBillNotFound
}

func (a *billsAutopay) WithdrawBill(ctx context.Context, tx pgx.Tx, c usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error) {
	return a.ConfirmBill(ctx, tx, c, id, billID)
}

func (a *billsAutopay) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.got) == 0 {
		return ""
	}
	return a.got[len(a.got)-1]
}

type fakeOps struct{}

func (fakeOps) Day(_ context.Context, gateway string, day time.Time) (books.Result, error) {
	return books.Result{Date: day, Gateway: gateway, Status: books.Status("pending")}, nil
}
func (fakeOps) Known(gateway string) bool { return gateway == "sim1" }
func (fakeOps) RegistryDay(_ context.Context, registry string, day time.Time) (books.Result, error) {
	return books.Result{Date: day, Gateway: registry, Status: books.Discrepancies, Operations: 1,
		Discrepancies: []books.Discrepancy{{Kind: books.CapturedNotAccepted, GatewayReference: "p1", Detail: "annulled"}}}, nil
}
func (fakeOps) KnownRegistry(registry string) bool { return registry == "gmp1" }
func (fakeOps) Daily(context.Context, time.Time) (reports.Daily, error) {
	return reports.Daily{}, nil
}

// setupEdges is setup with a recording Autopay and fake operator reads.
func setupEdges(t *testing.T) (testBundle, *billsAutopay) {
	t.Helper()
	auto := &billsAutopay{}
	return setupWithAutopay(t, auto), auto
}

// setupWithAutopay serves auto as the autopay use cases, with fake
// operator reads.
func setupWithAutopay(t *testing.T, auto api.Autopay) testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	srv := api.NewServer(api.Deps{
		Keys: apikeys.NewStore(pool, adminKey), Idempotency: idempotency.NewStore(pool, time.Minute),
		Autopay: auto, Clock: clk, Reconciliation: fakeOps{}, Reports: fakeOps{}, Logger: zerolog.Nop(),
	})
	ts := httptest.NewServer(openapitest.Wrap(t, srv))
	t.Cleanup(ts.Close)
	return testBundle{pool: pool, server: ts, clock: clk}
}

// limitedAutopay refuses every enrollment creation and card change as over
// a velocity limit.
type limitedAutopay struct{ api.Autopay }

func (limitedAutopay) CreateEnrollment(context.Context, pgx.Tx, usecases.Caller, enrollments.New) (enrollments.Enrollment, error) {
	return enrollments.Enrollment{}, &velocity.ExceededError{Limit: velocity.Creations, Max: 20, RetryAfter: 90 * time.Second}
}

func (limitedAutopay) ChangeEnrollmentPaymentMethod(context.Context, pgx.Tx, usecases.Caller, uuid.UUID,
	rebilltype.PaymentMethod) (enrollments.Enrollment, error) {
	return enrollments.Enrollment{}, &velocity.ExceededError{Limit: velocity.PaymentMethodChanges, Max: 10, RetryAfter: time.Hour}
}

// The enrollment routes that count against a velocity limit answer 429
// velocity-limit with Retry-After, as the document lists for them (the
// wrapper fails the test on a status an operation does not list).
func TestEnrollmentVelocityLimitsAreDocumented(t *testing.T) {
	t.Parallel()
	b := setupWithAutopay(t, limitedAutopay{})
	customer := b.newKey(t, "customer", "cust-fast")
	card := `{"gateway": "sim1", "token": "tok_ok", "brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030}`
	for _, tc := range []struct{ path, body, retryAfter string }{
		{"/v1/enrollments", `{"customer_id": "cust-fast", "kind": "housing", "account_ref": "75ДА533315",
			"currency": "RUB", "max_amount": 500000, "payment_method": ` + card + `}`, "90"},
		{"/v1/enrollments/0190a8f4-1c2d-7e3f-8a4b-5c6d7e8f9a0b/payment-method", card, "3600"},
	} {
		res := b.do(t, http.MethodPost, tc.path, customer, "fast-"+tc.retryAfter, tc.body)
		require.Equal(t, http.StatusTooManyRequests, res.status, "%s: %s", tc.path, res.body)
		require.Equal(t, "https://rebill.dev/problems/velocity-limit", res.json(t)["type"], tc.path)
		require.Equal(t, tc.retryAfter, res.header.Get("Retry-After"), tc.path)
	}
}

// A path id reaches the handler unescaped exactly once, whether its
// encoding is the canonical one (Cyrillic) or not (%2F), so every id the
// API accepts can be addressed.
func TestPathParametersAreUnescapedOnce(t *testing.T) {
	t.Parallel()
	b, auto := setupEdges(t)
	enr := "0190a8f4-1c2d-7e3f-8a4b-5c6d7e8f9a0b"
	for i, tc := range []struct{ segment, want string }{
		{"INV%2F2026%2F12", "INV/2026/12"},
		{"%D0%A1%D1%87%D1%91%D1%82-7", "Счёт-7"},
		{"A%252FB", "A%2FB"},
		{"plain-1", "plain-1"},
		{"a%20b%3Fc%23d", "a b?c#d"},
		{"%2E%2E", ".."},
	} {
		for _, action := range []string{"confirm", "withdraw"} {
			res := b.do(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills/"+tc.segment+"/"+action, adminKey,
				fmt.Sprintf("bill-%d-%s", i, action), `{}`)
			require.Equal(t, http.StatusNotFound, res.status, "%s: %s", tc.segment, res.body)
			require.Equal(t, tc.want, auto.last(), "%s %s", action, tc.segment)
		}
	}
	// The uuid of the path too is unescaped before it is read.
	res := b.do(t, http.MethodPost, "/v1/enrollments/"+strings.Replace(enr, "a", "%61", 1)+"/bills/x/confirm", adminKey, "bill-u", `{}`)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, "x", auto.last())
}

// HEAD is served on every GET route with the GET's status and headers and
// no body; an unknown method is 404 where the path does not exist and 405
// with Allow where it does.
func TestHeadAndUnknownMethods(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/openapi.json", "/v1/subscriptions"} {
		res := b.do(t, http.MethodHead, path, adminKey, "", "")
		require.Equal(t, http.StatusOK, res.status, path)
		require.Empty(t, res.body, path)
		require.NotEmpty(t, res.header.Get("Content-Type"), path)
	}
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodHead, "/v1/subscriptions", "", "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodHead, "/v1/nowhere", adminKey, "", "").status)

	for _, method := range []string{"M1", "PROPFIND", "PUT"} {
		res := b.do(t, method, "/v1/nowhere/at-all", adminKey, "", "")
		require.Equal(t, http.StatusNotFound, res.status, method)
		res = b.do(t, method, "/v1/subscriptions", adminKey, "", "")
		require.Equal(t, http.StatusMethodNotAllowed, res.status, method)
		require.Equal(t, "GET, HEAD, POST", res.header.Get("Allow"), method)
	}
	res := b.do(t, http.MethodDelete, "/v1/subscriptions/0190a8f4-1c2d-7e3f-8a4b-5c6d7e8f9a0b/pause", adminKey, "", "")
	require.Equal(t, http.StatusMethodNotAllowed, res.status)
	require.Equal(t, "POST", res.header.Get("Allow"))
}

// A query parameter given twice is refused naming it, never read as its
// first value.
func TestRepeatedQueryParameterIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodGet, "/v1/subscriptions?limit=1&limit=100", adminKey, "", "")
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	require.Contains(t, string(res.body), `"field":"limit"`)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/subscriptions?limit=1", adminKey, "", "").status)
}

// Reconciliation and reports take days from 2000-01-01 to the service
// clock's today + 1 day.
func TestReportDatesAreBounded(t *testing.T) {
	t.Parallel()
	b, _ := setupEdges(t)
	for _, tc := range []struct {
		date string
		want int
	}{
		{"0000-01-01", http.StatusBadRequest}, {"1999-12-31", http.StatusBadRequest}, {"9999-12-31", http.StatusBadRequest},
		{"2026-12-03", http.StatusBadRequest}, {"2000-01-01", http.StatusOK}, {"2026-12-02", http.StatusOK},
	} {
		for _, path := range []string{"/v1/reconciliation?gateway=sim1&date=", "/v1/reports/daily?date="} {
			res := b.do(t, http.MethodGet, path+tc.date, adminKey, "", "")
			require.Equal(t, tc.want, res.status, "%s%s: %s", path, tc.date, res.body)
			if tc.want == http.StatusBadRequest {
				require.Contains(t, string(res.body), `"field":"date"`)
			}
		}
	}
}

// GET /v1/reconciliation takes exactly one of gateway and registry, and
// answers a registry's day in the gateway's shape (the contract checks
// it), its discrepancies' references being payment ids.
func TestReconciliationOfAGatewayOrARegistry(t *testing.T) {
	t.Parallel()
	b, _ := setupEdges(t)
	for _, tc := range []struct {
		query  string
		want   int
		fields []string
	}{
		{"", http.StatusBadRequest, []string{"gateway", "registry"}},
		{"&gateway=sim1&registry=gmp1", http.StatusBadRequest, []string{"gateway", "registry"}},
		{"&registry=sim1", http.StatusBadRequest, []string{"registry"}},
		{"&gateway=gmp1", http.StatusBadRequest, []string{"gateway"}},
		{"&gateway=sim1", http.StatusOK, nil},
		{"&registry=gmp1", http.StatusOK, nil},
	} {
		res := b.do(t, http.MethodGet, "/v1/reconciliation?date=2026-11-30"+tc.query, adminKey, "", "")
		require.Equal(t, tc.want, res.status, "%s: %s", tc.query, res.body)
		for _, f := range tc.fields {
			require.Contains(t, string(res.body), `"field":"`+f+`"`, tc.query)
		}
	}
	got := b.do(t, http.MethodGet, "/v1/reconciliation?date=2026-11-30&registry=gmp1", adminKey, "", "").json(t)
	require.Equal(t, "gmp1", got["gateway"])
	require.Equal(t, "discrepancies", got["status"])
	d := got["discrepancies"].([]any)[0].(map[string]any)
	require.Equal(t, []any{"captured_not_accepted", "p1"}, []any{d["kind"], d["gateway_reference"]})
}

// Pause's resume_at has the billing anchor's horizon.
func TestResumeAtHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "s-1", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	id := res.json(t)["id"].(string)
	far := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-1", `{"resume_at":"9999-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusBadRequest, far.status, string(far.body))
	require.Contains(t, string(far.body), `"field":"resume_at"`)
	require.Equal(t, "active", b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)["status"])
	ok := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "p-2", `{"resume_at":"2036-11-30T00:00:00Z"}`)
	require.Equal(t, http.StatusOK, ok.status, string(ok.body))
}

// Webhook endpoints: events are stored once each, a URL must be in RFC
// 3986 form, and a redelivery names its event.
func TestWebhookEndpointInputEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := strings.Repeat(`"charge.succeeded",`, 3000) + `"subscription.paused","charge.succeeded"`
	res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, "wh-1", `{"url":"`+publicHook+`","events":[`+events+`]}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	require.Equal(t, []any{"charge.succeeded", "subscription.paused"}, res.json(t)["events"])
	id := res.json(t)["id"].(string)
	var stored []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT events FROM webhook_endpoints WHERE id = $1`, id).Scan(&stored))
	require.Equal(t, []string{"charge.succeeded", "subscription.paused"}, stored)

	for i, bad := range []string{"https://93.184.216.34/hooks/a b", "https://93.184.216.34/hooks/a\tb", "https://93.184.216.34/hooks/<x>",
		"https://93.184.216.34/hooks/ü"} {
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", adminKey, fmt.Sprintf("wh-bad-%d", i),
			`{"url":`+jsonString(bad)+`,"events":["*"]}`)
		require.Equal(t, http.StatusBadRequest, res.status, "%q: %s", bad, res.body)
		require.Contains(t, string(res.body), `"field":"url"`)
	}
	require.Equal(t, 1, b.count(t, "webhook_endpoints"))

	for i, body := range []string{`{}`, `{"event_id":""}`} {
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/redeliver", adminKey, fmt.Sprintf("r-%d", i), body)
		require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
		require.Contains(t, string(res.body), `"field":"event_id"`)
	}
}

func jsonString(s string) string {
	var buf strings.Builder
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			buf.WriteString(`\` + string(r))
		case r < 0x20:
			fmt.Fprintf(&buf, `\u%04x`, r)
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
	return buf.String()
}
