package clientlive_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/client"
)

// recorder is the client's transport in a test: it sees every attempt the
// client makes (retries included), with its Idempotency-Key and status.
type recorder struct {
	mu       sync.Mutex
	next     http.RoundTripper
	keys     []string
	statuses []int // 0: no answer
	paths    []string
	onStatus func(int)
}

func newRecorder() *recorder { return &recorder{next: &http.Transport{}} }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	status := 0
	if err == nil {
		status = res.StatusCode
	}
	r.mu.Lock()
	r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	r.statuses = append(r.statuses, status)
	r.paths = append(r.paths, req.URL.RequestURI())
	hook := r.onStatus
	r.mu.Unlock()
	if hook != nil {
		hook(status)
	}
	return res, err
}

func (r *recorder) seen() (keys []string, statuses []int, paths []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys), slices.Clone(r.statuses), slices.Clone(r.paths)
}

func (r *recorder) client() client.Option { return client.HTTPClient(&http.Client{Transport: r}) }

// dropFirstAnswer is a proxy in front of a node that forwards the first
// POST and then closes the connection instead of answering: the
// subscription is created, the client never hears of it.
func dropFirstAnswer(t *testing.T, target string) *httptest.Server {
	u, err := url.Parse(target)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropped := false
		if r.Method == http.MethodPost {
			once.Do(func() {
				dropped = true
				rec := httptest.NewRecorder()
				proxy.ServeHTTP(rec, r)
				if rec.Code != http.StatusCreated {
					t.Errorf("the first attempt answered %d, want 201", rec.Code)
				}
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				conn.Close()
			})
		}
		if !dropped {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A create whose answer is lost is sent again with the same
// Idempotency-Key: the node replays the first outcome and one
// subscription exists, not two.
func TestLostAnswerIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	rec := newRecorder()
	c := newClient(t, dropFirstAnswer(t, n.url).URL, adminKey, rec.client())
	ctx := context.Background()

	res, err := c.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-lost"))
	require.NoError(t, err)
	require.NotNil(t, res.JSON201)
	require.Equal(t, "true", res.HTTPResponse.Header.Get("Idempotent-Replayed"), "the retry got the stored first answer")

	keys, statuses, _ := rec.seen()
	require.Equal(t, []int{0, http.StatusCreated}, statuses)
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1], "one key for the logical call and its retry")

	var ids []string
	for s, err := range newClient(t, n.url, adminKey).Subscriptions(ctx, client.ListSubscriptionsParams{CustomerId: ptr("cust-lost")}) {
		require.NoError(t, err)
		ids = append(ids, s.Id.String())
	}
	require.Equal(t, []string{res.JSON201.Id.String()}, ids, "exactly one subscription")

	// The next logical call is a new key: a second subscription.
	res2, err := c.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-lost"))
	require.NoError(t, err)
	require.NotEqual(t, res.JSON201.Id, res2.JSON201.Id)
	keys, _, _ = rec.seen()
	require.NotEqual(t, keys[0], keys[2])
}

// The iterator walks every page, fetches a page only when needed, and a
// break stops it.
func TestIteratorWalksPages(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	admin := newClient(t, n.url, adminKey)
	var created []string
	for range 5 {
		res, err := admin.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-pages"))
		require.NoError(t, err)
		created = append(created, res.JSON201.Id.String())
	}
	_, err := admin.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-other"))
	require.NoError(t, err)

	rec := newRecorder()
	c := newClient(t, n.url, adminKey, rec.client())
	params := client.ListSubscriptionsParams{CustomerId: ptr("cust-pages"), Limit: ptr(2)}
	var got []string
	for s, err := range c.Subscriptions(ctx, params) {
		require.NoError(t, err)
		require.Equal(t, "cust-pages", s.CustomerId)
		got = append(got, s.Id.String())
	}
	require.ElementsMatch(t, created, got)
	require.Len(t, got, 5, "no item twice")
	_, _, paths := rec.seen()
	require.Len(t, paths, 3, "pages of 2, 2 and 1: %v", paths)

	rec2 := newRecorder()
	c2 := newClient(t, n.url, adminKey, rec2.client())
	count := 0
	for _, err := range c2.Subscriptions(ctx, params) {
		require.NoError(t, err)
		if count++; count == 3 {
			break
		}
	}
	_, _, paths = rec2.seen()
	require.Len(t, paths, 2, "the third page is never fetched")
}

// Errors are *Problem values with the node's type, status and field errors.
func TestProblemErrors(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	c := newClient(t, n.url, adminKey)

	bad := subscription("cust-bad")
	bad.Amount = 0
	bad.PaymentMethod.ExpMonth = 13
	res, err := c.CreateSubscriptionWithResponse(ctx, nil, bad)
	require.Nil(t, res)
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Equal(t, client.ProblemValidation, p.Slug())
	require.Equal(t, client.ProblemTypeBase+"validation-error", p.Type)
	fields := map[string]bool{}
	for _, f := range p.FieldErrors() {
		fields[f.Field] = true
	}
	require.True(t, fields["amount"], "%v", p.FieldErrors())
	require.True(t, fields["payment_method.exp_month"], "%v", p.FieldErrors())
	require.Contains(t, err.Error(), "validation-error")
	require.NotContains(t, err.Error(), "tok_ok_visa", "what the client sent is not in the message")

	_, err = c.GetSubscriptionWithResponse(ctx, "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
	require.ErrorAs(t, err, &p)
	require.Equal(t, client.ProblemNotFound, p.Slug())
	require.Equal(t, http.StatusNotFound, p.Status)

	// Through an iterator too: a limit out of range is one error, then the end.
	var errs []error
	for _, err := range c.Subscriptions(ctx, client.ListSubscriptionsParams{Limit: ptr(1000)}) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	require.ErrorAs(t, errs[0], &p)
	_, named := p.Field("limit")
	require.True(t, named, "%v", p.FieldErrors())

	_, err = newClient(t, n.url, "not-a-key-0123456789abcdef0123456789").GetSubscriptionWithResponse(ctx, "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusUnauthorized, p.Status)
	require.NotContains(t, err.Error(), "not-a-key", "the API key is never in an error")
}

// While the first request with a key is still running the node answers
// 409 idempotency-key-in-use with Retry-After; the client waits and sends
// the same request again, which runs once the first one is done.
func TestInFlightConflictIsRetried(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	admin := newClient(t, n.url, adminKey)
	created, err := admin.CreateApiKeyWithResponse(ctx, nil, client.ApiKeyCreate{Role: client.RoleCustomer, CustomerId: ptr("cust-409")})
	require.NoError(t, err)
	customerKey := *created.JSON201.Key

	// Another request holds the key, as a first attempt still running does.
	store := idempotency.NewStore(n.pool, time.Minute)
	body, err := json.Marshal(subscription("cust-409"))
	require.NoError(t, err)
	outcome, _, claim, err := store.Claim(ctx, "customer:cust-409", "order-409", idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", body))
	require.NoError(t, err)
	require.Equal(t, idempotency.Execute, outcome)

	rec := newRecorder()
	released := make(chan error, 1)
	rec.onStatus = func(status int) {
		if status == http.StatusConflict {
			select {
			case released <- nil:
				claim.Rollback(context.Background())
			default:
			}
		}
	}
	c := newClient(t, n.url, customerKey, rec.client())
	start := time.Now()
	res, err := c.CreateSubscriptionWithResponse(ctx, &client.CreateSubscriptionParams{IdempotencyKey: "order-409"}, subscription("cust-409"))
	require.NoError(t, err)
	require.NoError(t, <-released)
	require.NotNil(t, res.JSON201)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "Retry-After: 1 was honoured")

	keys, statuses, _ := rec.seen()
	require.Equal(t, []int{http.StatusConflict, http.StatusCreated}, statuses)
	require.Equal(t, []string{"order-409", "order-409"}, keys, "the caller's key, on every attempt")

	count := 0
	for _, err := range c.Subscriptions(ctx, client.ListSubscriptionsParams{}) {
		require.NoError(t, err)
		count++
	}
	require.Equal(t, 1, count)
}

// A real delivery verifies with the endpoint's secret, through the same
// code the node signs with; a changed body or another secret does not.
func TestVerifyWebhookRealDelivery(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	type delivery struct {
		body []byte
		sig  string
	}
	got := make(chan delivery, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{body, r.Header.Get(client.WebhookSignatureHeader)}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	c := newClient(t, n.url, adminKey)
	ep, err := c.CreateWebhookEndpointWithResponse(ctx, nil, client.WebhookEndpointCreate{Url: receiver.URL, Events: []string{"subscription.created"}})
	require.NoError(t, err)
	secret := *ep.JSON201.Secret
	sub, err := c.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-hook"))
	require.NoError(t, err)

	var d delivery
	select {
	case d = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}
	require.NoError(t, client.VerifyWebhook(d.body, d.sig, secret))
	require.NoError(t, client.VerifyWebhook(d.body, d.sig, "whsec_rolled_away", secret), "any held secret")
	require.ErrorIs(t, client.VerifyWebhook(d.body, d.sig, "whsec_other"), client.ErrWebhookMismatch)
	tampered := append(slices.Clone(d.body[:len(d.body)-1]), ' ', d.body[len(d.body)-1])
	require.ErrorIs(t, client.VerifyWebhook(tampered, d.sig, secret), client.ErrWebhookMismatch)
	require.ErrorIs(t, client.VerifyWebhook(d.body, "", secret), client.ErrWebhookBadHeader)

	ev, err := client.ParseWebhook(d.body, d.sig, secret)
	require.NoError(t, err)
	require.Equal(t, client.EventType("subscription.created"), ev.Type)
	obj, err := ev.Data.Object.AsSubscription()
	require.NoError(t, err)
	require.Equal(t, sub.JSON201.Id, obj.Id)
	_, err = client.ParseWebhook(tampered, d.sig, secret)
	require.ErrorIs(t, err, client.ErrWebhookMismatch)
}

// A response enum may gain values (responses only add): a status or event
// type this client does not know decodes as its string, and properties it
// does not know are ignored. The answers are the node's own, with the
// values changed.
func TestUnknownEnumValuesDecode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	c := newClient(t, n.url, adminKey)
	res, err := c.CreateSubscriptionWithResponse(ctx, nil, subscription("cust-enum"))
	require.NoError(t, err)
	id := res.JSON201.Id.String()
	events, err := c.ListEventsWithResponse(ctx, &client.ListEventsParams{})
	require.NoError(t, err)
	require.NotEmpty(t, events.JSON200.Data)

	var sub map[string]any
	require.NoError(t, json.Unmarshal(res.Body, &sub))
	sub["status"] = "frozen"
	sub["interval"] = "fortnight"
	sub["loyalty_tier"] = "gold"
	var list map[string]any
	require.NoError(t, json.Unmarshal(events.Body, &list))
	first := list["data"].([]any)[0].(map[string]any)
	first["type"] = "subscription.frozen"
	first["data"].(map[string]any)["object"].(map[string]any)["status"] = "frozen"

	changed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/subscriptions/" + id:
			_ = json.NewEncoder(w).Encode(sub)
		case "/v1/events":
			_ = json.NewEncoder(w).Encode(list)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(changed.Close)
	cc := newClient(t, changed.URL, adminKey)

	got, err := cc.GetSubscriptionWithResponse(ctx, id)
	require.NoError(t, err)
	require.Equal(t, client.SubscriptionStatus("frozen"), got.JSON200.Status)
	require.Equal(t, client.Interval("fortnight"), got.JSON200.Interval)
	require.False(t, got.JSON200.Status.Valid(), "Valid() tells a value this version does not know")
	require.Equal(t, res.JSON201.Id, got.JSON200.Id)

	for ev, err := range cc.Events(ctx, client.ListEventsParams{}) {
		require.NoError(t, err)
		require.Equal(t, client.EventType("subscription.frozen"), ev.Type)
		obj, err := ev.Data.Object.AsSubscription()
		require.NoError(t, err)
		require.Equal(t, client.SubscriptionStatus("frozen"), obj.Status)
		break
	}
}
