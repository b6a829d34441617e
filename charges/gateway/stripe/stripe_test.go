package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/testkit/stripetest"
	"github.com/rebill/rebill/testkit/testsupport"
)

const (
	customer = "cus_Q1w2e3"
	okCard   = customer + "/pm_card_visa"
	apiKey   = "sk_test_rebill"
)

var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

type testBundle struct {
	fake    *stripetest.Server
	clock   *testsupport.Clock
	gateway *stripe.Gateway
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clk := testsupport.NewClock(start)
	fake := stripetest.NewServer(t)
	fake.Now = clk.Now
	g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: fake.URL, APIKey: apiKey, Timeout: 2 * time.Second,
		HTTPClient: oneShotClient(), Clock: clk})
	require.NoError(t, err)
	return &testBundle{fake: fake, clock: clk, gateway: g}
}

// oneShotClient opens a connection per request, so that a lost answer
// reaches the adapter: on a reused keep-alive connection Go's transport
// would send the request again by itself (see stripetest.LoseAnswer).
func oneShotClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	return &http.Client{Transport: t}
}

func request(key, token string) gateway.Request {
	return gateway.Request{IdempotencyKey: "sub_1:2026-12-01:a1:" + key, Token: token, Amount: 1999, Currency: "EUR",
		ChargeKey: "sub_1:2026-12-01"}
}

// hold places a hold that the test then captures or voids.
func (b *testBundle) hold(t *testing.T, key string) gateway.Result {
	t.Helper()
	res, err := b.gateway.Authorize(context.Background(), request(key, okCard))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	return res
}

// TestAuthorizeOutcomes is the mapping table: what Stripe answers to a
// hold, and what the charge makes of it.
func TestAuthorizeOutcomes(t *testing.T) {
	t.Parallel()
	type want struct {
		status gateway.Status
		code   string
		hard   bool
		err    error // instead of a result
		calls  int   // requests that reached Stripe
	}
	tests := []struct {
		name  string
		token string
		fault *stripetest.Fault
		want  want
	}{
		{"hold placed", okCard, nil, want{status: gateway.StatusSucceeded, calls: 1}},
		{"insufficient_funds is soft", customer + "/pm_decline_insufficient_funds", nil, want{gateway.StatusDeclined, "insufficient_funds", false, nil, 1}},
		{"processing_error is soft", customer + "/pm_decline_processing_error", nil, want{gateway.StatusDeclined, "processing_error", false, nil, 1}},
		{"do_not_honor is soft", customer + "/pm_decline_do_not_honor", nil, want{gateway.StatusDeclined, "do_not_honor", false, nil, 1}},
		{"generic_decline is soft", customer + "/pm_decline_generic_decline", nil, want{gateway.StatusDeclined, "generic_decline", false, nil, 1}},
		{"an unknown code is soft", customer + "/pm_decline_try_again_later", nil, want{gateway.StatusDeclined, "try_again_later", false, nil, 1}},
		{"stolen_card is hard", customer + "/pm_decline_stolen_card", nil, want{gateway.StatusDeclined, "stolen_card", true, nil, 1}},
		{"lost_card is hard", customer + "/pm_decline_lost_card", nil, want{gateway.StatusDeclined, "lost_card", true, nil, 1}},
		{"expired_card is hard", customer + "/pm_decline_expired_card", nil, want{gateway.StatusDeclined, "expired_card", true, nil, 1}},
		{"pickup_card is hard", customer + "/pm_decline_pickup_card", nil, want{gateway.StatusDeclined, "pickup_card", true, nil, 1}},
		{"authentication needs the customer", customer + "/pm_auth_required", nil, want{gateway.StatusFailed, "authentication_required", true, nil, 1}},
		{"unknown payment method fails", customer + "/pm_missing", nil, want{gateway.StatusFailed, "resource_missing", true, nil, 1}},
		{"token without customer fails unsent", "pm_card_visa", nil, want{gateway.StatusFailed, "invalid_token", true, nil, 0}},
		{"token of three parts fails unsent", okCard + "/x", nil, want{gateway.StatusFailed, "invalid_token", true, nil, 0}},
		{"empty token fails unsent", "", nil, want{gateway.StatusFailed, "invalid_token", true, nil, 0}},
		{"503 did nothing", okCard, new(stripetest.Answer(http.StatusServiceUnavailable, "")), want{err: gateway.ErrUnavailable, calls: 1}},
		{"429 lock_timeout did nothing", okCard, new(stripetest.Answer(http.StatusTooManyRequests, "lock_timeout")), want{err: gateway.ErrUnavailable, calls: 1}},
		{"429 rate limit did nothing", okCard, new(stripetest.Answer(http.StatusTooManyRequests, "rate_limit")), want{err: gateway.ErrUnavailable, calls: 1}},
		{"401 refused key did nothing", okCard, new(stripetest.Answer(http.StatusUnauthorized, "")), want{err: gateway.ErrUnavailable, calls: 1}},
		{"500 may have acted", okCard, new(stripetest.Answer(http.StatusInternalServerError, "")), want{err: gateway.ErrUnknownOutcome, calls: 1}},
		{"502 may have acted", okCard, new(stripetest.Answer(http.StatusBadGateway, "")), want{err: gateway.ErrUnknownOutcome, calls: 1}},
		{"lost answer", okCard, new(stripetest.LoseAnswer()), want{err: gateway.ErrUnknownOutcome, calls: 1}},
		{"409 key in use: the first send still runs", okCard, new(stripetest.Answer(http.StatusConflict, "idempotency_key_in_use")), want{err: gateway.ErrUnknownOutcome, calls: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tt.fault != nil {
				b.fake.Fail(stripetest.OpCreate, *tt.fault)
			}
			res, err := b.gateway.Authorize(context.Background(), request("authorize", tt.token))
			require.Equal(t, tt.want.calls, b.fake.Calls(stripetest.OpCreate))
			if tt.want.err != nil {
				require.ErrorIs(t, err, tt.want.err)
				requireNoSecret(t, err, tt.token)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.status, res.Status)
			require.Equal(t, tt.want.code, res.DeclineCode)
			require.Equal(t, tt.want.hard, res.Hard)
			require.Equal(t, gateway.OpAuthorize, res.Op)
			require.Equal(t, request("authorize", "").IdempotencyKey, res.IdempotencyKey)
			if tt.want.status == gateway.StatusSucceeded {
				intents := b.fake.Intents()
				require.Len(t, intents, 1)
				require.Equal(t, intents[0].ID, res.Reference)
				require.Equal(t, "requires_capture", intents[0].Status)
				require.Equal(t, int64(1999), res.Amount)
				require.Equal(t, "EUR", res.Currency)
			}
		})
	}
}

// requireNoSecret: an error names neither the token's parts nor the key.
func requireNoSecret(t *testing.T, err error, token string) {
	t.Helper()
	for part := range strings.SplitSeq(token, "/") {
		if part != "" {
			require.NotContains(t, err.Error(), part)
		}
	}
	require.NotContains(t, err.Error(), apiKey)
}

func TestUnreachableStripeDidNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.Close() // connection refused: nothing was sent
	_, err := b.gateway.Authorize(context.Background(), request("authorize", okCard))
	require.ErrorIs(t, err, gateway.ErrUnavailable)
	requireNoSecret(t, err, okCard)
}

func TestTimeoutAfterSendingIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: b.fake.URL, APIKey: apiKey, Timeout: 200 * time.Millisecond,
		HTTPClient: oneShotClient(), Clock: b.clock})
	require.NoError(t, err)
	b.fake.Fail(stripetest.OpCreate, stripetest.Hang())
	_, err = g.Authorize(context.Background(), request("authorize", okCard))
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
	require.Len(t, b.fake.Intents(), 1, "Stripe placed the hold whose answer timed out")
}

// TestReplaySameKeyOneHold: a repeated authorize, in turn or at once, gets
// the first answer and places no second hold.
func TestReplaySameKeyOneHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.hold(t, "authorize")
	var wg sync.WaitGroup
	refs := make([]string, 8)
	for i := range refs {
		wg.Go(func() {
			res, err := b.gateway.Authorize(context.Background(), request("authorize", okCard))
			if err == nil {
				refs[i] = res.Reference
			}
		})
	}
	wg.Wait()
	for _, ref := range refs {
		require.Equal(t, first.Reference, ref)
	}
	require.Len(t, b.fake.Intents(), 1)

	// A new attempt (a new key) is a new hold.
	second := b.hold(t, "a2:authorize")
	require.NotEqual(t, first.Reference, second.Reference)
	require.Len(t, b.fake.Intents(), 2)
}

// TestLostAuthorizeFoundByReplay: Stripe placed the hold and the answer was
// lost; the look-up replays the create under its key and gets the hold's
// id, creating nothing.
func TestLostAuthorizeFoundByReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := request("authorize", okCard)
	sentAt := b.clock.Now()
	b.fake.Fail(stripetest.OpCreate, stripetest.LoseAnswer())
	_, err := b.gateway.Authorize(ctx, req)
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
	require.Len(t, b.fake.Intents(), 1)

	b.clock.Advance(22 * time.Hour)
	_, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, SentAt: sentAt})
	require.ErrorIs(t, err, gateway.ErrUnprovable, "a look that may not replay cannot tell")
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCreate), "and sends nothing")
	res, err := b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, SentAt: sentAt, MayReplay: true})
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	intents := b.fake.Intents()
	require.Len(t, intents, 1, "the replay created no second PaymentIntent")
	require.Equal(t, intents[0].ID, res.Reference)

	// A lost decline is found the same way.
	declined := request("declined", customer+"/pm_decline_insufficient_funds")
	b.fake.Fail(stripetest.OpCreate, stripetest.LoseAnswer())
	_, err = b.gateway.Authorize(ctx, declined)
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
	res, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: declined, SentAt: b.clock.Now(), MayReplay: true})
	require.NoError(t, err)
	require.Equal(t, gateway.StatusDeclined, res.Status)
	require.Equal(t, "insufficient_funds", res.DeclineCode)
	require.Len(t, b.fake.Intents(), 2)
}

// TestLostAuthorizePastTheKeyLifetimeIsUnprovable: past 23 h Stripe may
// have forgotten the key, and a replay could place a second hold: the
// look-up sends nothing and says it cannot tell.
func TestLostAuthorizePastTheKeyLifetimeIsUnprovable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := request("authorize", okCard)
	sentAt := b.clock.Now()
	b.fake.Fail(stripetest.OpCreate, stripetest.LoseAnswer())
	_, err := b.gateway.Authorize(ctx, req)
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)

	b.clock.Advance(stripe.ReplayWindow + time.Minute)
	_, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, SentAt: sentAt, MayReplay: true})
	require.ErrorIs(t, err, gateway.ErrUnprovable)
	_, err = b.gateway.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, MayReplay: true})
	require.ErrorIs(t, err, gateway.ErrUnprovable, "a send time not known is no proof of being in the window")
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCreate), "nothing was replayed")
	require.Len(t, b.fake.Intents(), 1)
}

func TestCaptureAndVoidByReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := b.hold(t, "a1:authorize")

	capture := request("a1:capture", okCard)
	capture.AuthorizationID = held.Reference
	res, err := b.gateway.Capture(ctx, capture)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	require.Equal(t, held.Reference, res.Reference)
	require.Equal(t, int64(1999), res.Amount)
	again, err := b.gateway.Capture(ctx, capture)
	require.NoError(t, err)
	require.Equal(t, res.Reference, again.Reference)

	other := b.hold(t, "a2:authorize")
	void := request("a2:void", okCard)
	void.AuthorizationID = other.Reference
	res, err = b.gateway.Void(ctx, void)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)

	intents := b.fake.Intents()
	require.Len(t, intents, 2)
	require.Equal(t, "succeeded", intents[0].Status)
	require.Equal(t, int64(1999), intents[0].AmountReceived)
	require.Equal(t, capture.IdempotencyKey, intents[0].Metadata["rebill_capture_key"])
	require.Equal(t, "canceled", intents[1].Status)

	// A capture of the voided hold is refused, not an outage.
	late := request("a2:capture", okCard)
	late.AuthorizationID = other.Reference
	res, err = b.gateway.Capture(ctx, late)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Equal(t, "payment_intent_unexpected_state", res.DeclineCode)

	// Capture and void name their hold; without one nothing is sent.
	sent := b.fake.Calls(stripetest.OpCapture) + b.fake.Calls(stripetest.OpCancel)
	res, err = b.gateway.Capture(ctx, request("a3:capture", okCard))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	res, err = b.gateway.Void(ctx, request("a3:void", okCard))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Equal(t, sent, b.fake.Calls(stripetest.OpCapture)+b.fake.Calls(stripetest.OpCancel))
}

func TestLostCaptureFoundByReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := b.hold(t, "a1:authorize")
	capture := request("a1:capture", okCard)
	capture.AuthorizationID = held.Reference

	lookup := gateway.LookupRequest{Op: gateway.OpCapture, Request: capture, SentAt: b.clock.Now()}
	_, err := b.gateway.Lookup(ctx, lookup)
	require.ErrorIs(t, err, gateway.ErrNotFound, "not captured yet")

	b.fake.Fail(stripetest.OpCapture, stripetest.LoseAnswer())
	_, err = b.gateway.Capture(ctx, capture)
	require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
	res, err := b.gateway.Lookup(ctx, lookup)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	require.Equal(t, int64(1999), res.Amount)
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCapture))
}

// TestLookupReadsThePaymentIntent is the status table of the package doc.
func TestLookupReadsThePaymentIntent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status string
		op     gateway.Op
		want   gateway.Status
		err    error
	}{
		{"requires_capture", gateway.OpAuthorize, gateway.StatusSucceeded, nil},
		{"requires_capture", gateway.OpCapture, "", gateway.ErrNotFound},
		{"requires_capture", gateway.OpVoid, "", gateway.ErrNotFound},
		{"succeeded", gateway.OpAuthorize, gateway.StatusSucceeded, nil},
		{"succeeded", gateway.OpCapture, gateway.StatusSucceeded, nil},
		{"succeeded", gateway.OpVoid, "", gateway.ErrNotFound},
		{"canceled", gateway.OpAuthorize, gateway.StatusSucceeded, nil},
		{"canceled", gateway.OpCapture, "", gateway.ErrNotFound},
		{"canceled", gateway.OpVoid, gateway.StatusSucceeded, nil},
		{"requires_action", gateway.OpAuthorize, gateway.StatusFailed, nil},
		{"processing", gateway.OpAuthorize, "", gateway.ErrUnknownOutcome},
		{"processing", gateway.OpCapture, "", gateway.ErrUnknownOutcome},
	}
	for _, tt := range tests {
		t.Run(tt.status+"/"+string(tt.op), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			held := b.hold(t, "a1:authorize")
			b.fake.SetStatus(held.Reference, tt.status)
			req := request("a1:"+string(tt.op), okCard)
			req.AuthorizationID = held.Reference
			res, err := b.gateway.Lookup(context.Background(), gateway.LookupRequest{Op: tt.op, Request: req, SentAt: b.clock.Now()})
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Status)
			require.Equal(t, held.Reference, res.Reference)
		})
	}

	t.Run("a declined hold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.gateway.Authorize(context.Background(), request("a1:authorize", customer+"/pm_decline_stolen_card"))
		require.NoError(t, err)
		req := request("a1:authorize", okCard)
		req.AuthorizationID = res.Reference
		found, err := b.gateway.Lookup(context.Background(), gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req})
		require.NoError(t, err)
		require.Equal(t, gateway.StatusDeclined, found.Status)
		require.Equal(t, "stolen_card", found.DeclineCode)
		require.True(t, found.Hard)
	})

	t.Run("an unknown reference proves nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := request("a1:capture", okCard)
		req.AuthorizationID = "pi_unknown"
		_, err := b.gateway.Lookup(context.Background(), gateway.LookupRequest{Op: gateway.OpCapture, Request: req})
		require.Error(t, err)
		require.NotErrorIs(t, err, gateway.ErrNotFound)
	})

	t.Run("a capture with no reference was never sent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.gateway.Lookup(context.Background(), gateway.LookupRequest{Op: gateway.OpCapture,
			Request: request("a1:capture", okCard), SentAt: b.clock.Now()})
		require.ErrorIs(t, err, gateway.ErrNotFound)
		require.Zero(t, b.fake.Calls(stripetest.OpRetrieve)+b.fake.Calls(stripetest.OpCreate))
	})
}

// TestOperationsListsTheDay: only the day's PaymentIntents, across pages,
// oldest first, each with the ops it records.
func TestOperationsListsTheDay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	b.clock.Set(day.Add(-time.Minute)) // the day before
	b.hold(t, "before:authorize")
	const n = 130 // more than one page of 100
	var captured string
	for i := range n {
		b.clock.Set(day.Add(time.Duration(i) * time.Minute))
		held := b.hold(t, fmt.Sprintf("d%d:authorize", i))
		if i == 7 {
			captured = held.Reference
			req := request("d7:capture", okCard)
			req.AuthorizationID = held.Reference
			_, err := b.gateway.Capture(ctx, req)
			require.NoError(t, err)
		}
	}
	b.clock.Set(day.Add(24 * time.Hour)) // the day after
	b.hold(t, "after:authorize")

	ops, err := b.gateway.Operations(ctx, day.Add(13*time.Hour))
	require.NoError(t, err)
	require.Len(t, ops, n+1)
	require.Equal(t, request("d0:authorize", "").IdempotencyKey, ops[0].IdempotencyKey)
	require.Equal(t, request(fmt.Sprintf("d%d:authorize", n-1), "").IdempotencyKey, ops[n].IdempotencyKey)
	for i := 1; i < len(ops); i++ {
		require.False(t, ops[i].At.Before(ops[i-1].At), "oldest first")
	}
	var captures []gateway.Result
	for _, op := range ops {
		if op.Op == gateway.OpCapture {
			captures = append(captures, op)
		}
	}
	require.Len(t, captures, 1)
	require.Equal(t, captured, captures[0].Reference)
	require.Equal(t, request("d7:capture", "").IdempotencyKey, captures[0].IdempotencyKey)
}

func TestNewChecksTheConfig(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewClock(start)
	for name, cfg := range map[string]stripe.Config{
		"no name":         {APIKey: apiKey, Clock: clk},
		"no key":          {Name: "s", Clock: clk},
		"no clock":        {Name: "s", APIKey: apiKey},
		"negative":        {Name: "s", APIKey: apiKey, Clock: clk, Timeout: -time.Second},
		"not an HTTP URL": {Name: "s", APIKey: apiKey, Clock: clk, BaseURL: "api.stripe.com"},
	} {
		_, err := stripe.New(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), apiKey, name)
	}
	g, err := stripe.New(stripe.Config{Name: "s", APIKey: apiKey, Clock: clk})
	require.NoError(t, err)
	require.Equal(t, "s", g.Name())
}

func TestLookupRefusesAnotherChargesPaymentIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := b.hold(t, "a1:authorize")
	req := request("a1:capture", okCard)
	req.ChargeKey = "sub_2:2026-12-01"
	req.AuthorizationID = held.Reference
	_, err := b.gateway.Lookup(context.Background(), gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req})
	require.ErrorContains(t, err, "belongs to charge sub_1:2026-12-01")
	require.NotErrorIs(t, err, gateway.ErrNotFound)
}

// TestKeyReusedWithAnotherCardAnswersTheKeysHold: a charge restored from a
// backup asks for its hold again under its key, with the card the
// customer changed to since; Stripe refuses the key (400
// idempotency_error), and the adapter finds the key's PaymentIntent among
// the customer's: the one hold, not an unknown outcome.
func TestKeyReusedWithAnotherCardAnswersTheKeysHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.hold(t, "a1:authorize")
	b.hold(t, "a2:authorize") // another hold of the customer, under another key
	again, err := b.gateway.Authorize(context.Background(), request("a1:authorize", customer+"/pm_card_mastercard"))
	require.NoError(t, err)
	require.Equal(t, first.Reference, again.Reference)
	require.Equal(t, gateway.StatusSucceeded, again.Status)
	require.Len(t, b.fake.Intents(), 2)
}

// TestKeyReusedForOtherMoneyIsForAPerson: the key's PaymentIntent holds
// another amount, or its capture took another amount: money moved that
// this call does not ask for, which a person settles; never unknown,
// which would send it again under the key.
func TestKeyReusedForOtherMoneyIsForAPerson(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.hold(t, "a1:authorize")
	other := request("a1:authorize", okCard)
	other.Amount = 2999
	_, err := b.gateway.Authorize(context.Background(), other)
	require.ErrorIs(t, err, gateway.ErrKeyReused)
	require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
	require.ErrorContains(t, err, "idempotency_error")

	capture := gateway.Request{IdempotencyKey: "sub_1:2026-12-01:a1:capture", Amount: 1999, Currency: "EUR",
		ChargeKey: "sub_1:2026-12-01", AuthorizationID: first.Reference}
	_, err = b.gateway.Capture(context.Background(), capture)
	require.NoError(t, err)
	capture.Amount = 999
	_, err = b.gateway.Capture(context.Background(), capture)
	require.ErrorIs(t, err, gateway.ErrKeyReused)
	require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
	intents := b.fake.Intents()
	require.Len(t, intents, 1)
	require.Equal(t, first.Reference, intents[0].ID)
}

// TestAnswersThatAreNotStripes: a proxy's error page, or a 200 that does
// not decode, is classified by its status.
func TestAnswersThatAreNotStripes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   error
	}{
		{http.StatusServiceUnavailable, gateway.ErrUnavailable},
		{http.StatusTooManyRequests, gateway.ErrUnavailable},
		{http.StatusBadGateway, gateway.ErrUnknownOutcome},
		{http.StatusGatewayTimeout, gateway.ErrUnknownOutcome},
		{http.StatusOK, gateway.ErrUnknownOutcome},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			t.Parallel()
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(`{"customer": "cus_Q1w2e3", "payment_method": "pm_card_visa"`)) // cut short
			}))
			t.Cleanup(proxy.Close)
			g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: proxy.URL, APIKey: apiKey, Clock: testsupport.NewClock(start)})
			require.NoError(t, err)
			_, err = g.Authorize(context.Background(), request("a1:authorize", okCard))
			require.ErrorIs(t, err, tt.want)
			if tt.want == gateway.ErrUnavailable {
				require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
			}
			requireNoSecret(t, err, okCard)
		})
	}
}

// TestTheFakeForgetsKeysAfterADay shows the hazard ReplayWindow guards
// against: a day after the first send, the same key places a second hold.
func TestTheFakeForgetsKeysAfterADay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.hold(t, "a1:authorize")
	b.clock.Advance(24*time.Hour + time.Second)
	second := b.hold(t, "a1:authorize")
	require.NotEqual(t, first.Reference, second.Reference)
	require.Len(t, b.fake.Intents(), 2)
}
