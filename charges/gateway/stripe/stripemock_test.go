package stripe_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/testkit/testsupport"
)

// startStripeMock starts stripe-mock, the go.mod tool dependency, on a free
// loopback port and returns its base URL. stripe-mock validates every
// request against Stripe's OpenAPI schema and answers fixtures: it proves
// request shapes, not behaviour (it keeps no state).
func startStripeMock(t *testing.T) string {
	t.Helper()
	// go tool -n builds the tool (or finds it in the build cache) and
	// prints its path: running the binary itself leaves no go process
	// between the test and the server to outlive a kill.
	out, err := exec.Command("go", "tool", "-n", "stripe-mock").Output()
	require.NoError(t, err, "build stripe-mock")
	cmd := exec.Command(strings.TrimSpace(string(out)), "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if a, ok := strings.CutPrefix(lines.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(time.Minute):
		t.Fatal("stripe-mock did not start listening within a minute")
		return ""
	}
}

// exchange is one request the adapter sent and the status it got.
type exchange struct {
	method, path, key string
	form              url.Values
	status            int
}

// recorder is a transport that keeps every exchange.
type recorder struct {
	mu  sync.Mutex
	got []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	form, _ := url.ParseQuery(string(body))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, exchange{req.Method, req.URL.Path, req.Header.Get("Idempotency-Key"), form, resp.StatusCode})
	return resp, nil
}

func (r *recorder) take() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestRequestShapesAgainstStripeMock: every request the adapter sends is
// one Stripe's schema accepts (stripe-mock answers 200), with the
// parameters and idempotency keys rebill's contract needs.
func TestRequestShapesAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base := startStripeMock(t)
	rec := &recorder{}
	clk := testsupport.NewClock(start)
	g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: base, APIKey: "sk_test_123",
		HTTPClient: &http.Client{Transport: rec}, Clock: clk})
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("stripe-mock refuses a request the schema does not allow", func(t *testing.T) {
		resp, err := http.PostForm(base+"/v1/payment_intents?amount=1&currency=eur&capture_methd=manual", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key")
		req, err := http.NewRequest(http.MethodPost, base+"/v1/payment_intents",
			strings.NewReader("amount=1999&currency=eur&capture_methd=manual"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an unknown parameter")
	})

	auth := request("a1:authorize", okCard)
	_, err = g.Authorize(ctx, auth)
	require.NoError(t, err)
	got := rec.take()
	require.Len(t, got, 1)
	require.Equal(t, http.StatusOK, got[0].status)
	require.Equal(t, "/v1/payment_intents", got[0].path)
	require.Equal(t, auth.IdempotencyKey, got[0].key)
	form := got[0].form
	for k, v := range map[string]string{"amount": "1999", "currency": "eur", "customer": customer,
		"payment_method": "pm_card_visa", "capture_method": "manual", "confirm": "true", "off_session": "true",
		"metadata[rebill_charge_key]": auth.ChargeKey, "metadata[rebill_authorize_key]": auth.IdempotencyKey} {
		require.Equal(t, v, form.Get(k), k)
	}

	capture := request("a1:capture", okCard)
	capture.AuthorizationID = "pi_123"
	_, _ = g.Capture(ctx, capture) // stripe-mock's fixture is no captured PaymentIntent: only the shape counts
	void := request("a1:void", okCard)
	void.AuthorizationID = "pi_123"
	_, _ = g.Void(ctx, void)
	_, _ = g.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpCapture, Request: capture})
	_, _ = g.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: auth, SentAt: clk.Now(), MayReplay: true})
	_, err = g.Operations(ctx, start)
	require.NoError(t, err)
	refund := request("r1:refund", "")
	refund.AuthorizationID, refund.Amount = "pi_123", 500
	_, err = g.Refund(ctx, refund)
	require.NoError(t, err)
	_, _ = g.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpRefund, Request: refund}) // the fixture carries no key: only the shape counts

	got = rec.take()
	require.Len(t, got, 8)
	want := []struct{ method, path, key string }{
		{http.MethodPost, "/v1/payment_intents/pi_123/capture", capture.IdempotencyKey},
		{http.MethodPost, "/v1/payment_intents/pi_123/cancel", void.IdempotencyKey},
		{http.MethodGet, "/v1/payment_intents/pi_123", ""},
		{http.MethodPost, "/v1/payment_intents", auth.IdempotencyKey},
		{http.MethodGet, "/v1/payment_intents", ""},
		{http.MethodGet, "/v1/refunds", ""},
		{http.MethodPost, "/v1/refunds", refund.IdempotencyKey},
		{http.MethodGet, "/v1/refunds", ""},
	}
	for i, w := range want {
		require.Equal(t, w.method+" "+w.path, got[i].method+" "+got[i].path)
		require.Equal(t, http.StatusOK, got[i].status, w.path)
		require.Equal(t, w.key, got[i].key, w.path)
	}
	require.Equal(t, "1999", got[0].form.Get("amount_to_capture"))
	require.Equal(t, "abandoned", got[1].form.Get("cancellation_reason"))
	require.Equal(t, form, got[3].form, "the replay is the very request first sent")
	for k, v := range map[string]string{"payment_intent": "pi_123", "amount": "500", "reason": "requested_by_customer",
		"metadata[rebill_charge_key]": refund.ChargeKey, "metadata[rebill_refund_key]": refund.IdempotencyKey} {
		require.Equal(t, v, got[6].form.Get(k), k)
	}
}
