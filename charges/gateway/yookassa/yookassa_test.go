package yookassa_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/yookassa"
	"github.com/rebill/rebill/testkit/testsupport"
)

// start is when every test begins, on the shop's clock and rebill's.
var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const chargeKey = "0b7c1f9e-2f5e-4c1a-9d43-8a1f2b3c4d5e:2026-12-01"

type testBundle struct {
	clock *testsupport.Clock
	fake  *fakeYooKassa
	gw    *yookassa.Gateway
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clk := testsupport.NewClock(start)
	fake := newFake(t, clk)
	gw, err := yookassa.New(yookassa.Config{Name: "yk1", BaseURL: fake.URL(), ShopID: fake.shopID,
		SecretKey: testSecret, Timeout: 5 * time.Second, Clock: clk})
	require.NoError(t, err)
	return &testBundle{clock: clk, fake: fake, gw: gw}
}

// request is attempt 1's op of the charge, for 499.00 RUB on token.
func request(op gateway.Op, token string) gateway.Request {
	return gateway.Request{IdempotencyKey: chargeKey + ":a1:" + string(op), Token: token, Amount: 49900,
		Currency: "RUB", ChargeKey: chargeKey}
}

// hold places a hold on pm_ok and returns its payment id.
func (b *testBundle) hold(ctx context.Context, t *testing.T) string {
	t.Helper()
	res, err := b.gw.Authorize(ctx, request(gateway.OpAuthorize, "pm_ok"))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)
	return res.Reference
}

// withPayment is req naming the hold id.
func withPayment(req gateway.Request, id string) gateway.Request {
	req.AuthorizationID = id
	return req
}

// requireClean requires that an error names neither the token nor the
// secret.
func (b *testBundle) requireClean(t *testing.T, err error, token string) {
	t.Helper()
	if err == nil {
		return
	}
	require.NotContains(t, err.Error(), testSecret)
	if token != "" {
		require.NotContains(t, err.Error(), token)
	}
}

// TestAuthorizeAnswers is the mapping of YooKassa's answers to a hold onto
// the charge's outcome.
func TestAuthorizeAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		token   string
		fault   func(f *fakeYooKassa)
		status  gateway.Status
		code    string
		hard    bool
		err     error
		noCalls bool // refused before any request
	}{
		{name: "Held", token: "pm_ok_4242", status: gateway.StatusSucceeded},
		{name: "PendingThenHeld", token: "pm_pending_1", status: gateway.StatusSucceeded},
		{name: "ProcessingThenHeld", token: "pm_slow_1", status: gateway.StatusSucceeded},
		{name: "InsufficientFunds", token: "pm_decline_insufficient_funds", status: gateway.StatusDeclined, code: "insufficient_funds"},
		{name: "IssuerUnavailable", token: "pm_decline_issuer_unavailable", status: gateway.StatusDeclined, code: "issuer_unavailable"},
		{name: "LimitExceeded", token: "pm_decline_payment_method_limit_exceeded", status: gateway.StatusDeclined, code: "payment_method_limit_exceeded"},
		{name: "CardExpired", token: "pm_decline_card_expired", status: gateway.StatusDeclined, code: "card_expired", hard: true},
		{name: "FraudSuspected", token: "pm_decline_fraud_suspected", status: gateway.StatusDeclined, code: "fraud_suspected", hard: true},
		{name: "PermissionRevoked", token: "pm_decline_permission_revoked", status: gateway.StatusDeclined, code: "permission_revoked", hard: true},
		{name: "MethodRestricted", token: "pm_decline_payment_method_restricted", status: gateway.StatusDeclined, code: "payment_method_restricted", hard: true},
		{name: "InternalTimeoutSoft", token: "pm_decline_internal_timeout", status: gateway.StatusDeclined, code: "internal_timeout"},
		{name: "UnknownReasonSoft", token: "pm_decline_brand_new_reason", status: gateway.StatusDeclined, code: "brand_new_reason"},
		{name: "GeneralDeclineSoft", token: "pm_decline_general_decline", status: gateway.StatusDeclined, code: "general_decline"},
		{name: "BadToken", token: "card_not_saved", status: gateway.StatusFailed, code: "invalid_request"},
		{name: "Unavailable503", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("create", 503) }, err: gateway.ErrUnavailable},
		{name: "RateLimited429", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("create", 429) }, err: gateway.ErrUnavailable},
		{name: "Internal500", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("create", 500) }, err: gateway.ErrUnknownOutcome},
		{name: "BadGateway502", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("create", 502) }, err: gateway.ErrUnknownOutcome},
		{name: "GatewayTimeout504", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.failNext("create", 504) }, err: gateway.ErrUnknownOutcome},
		{name: "WrongSecret401", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.set(func(f *fakeYooKassa) { f.secret = "rotated" }) }, err: gateway.ErrUnavailable},
		{name: "AnswerLost", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.loseNext("create", 1) }, err: gateway.ErrUnknownOutcome},
		{name: "NotSent", token: "pm_ok_1", fault: func(f *fakeYooKassa) { f.srv.Close() }, err: gateway.ErrUnavailable},
		{name: "PendingThenUnreadable", token: "pm_pending_1", fault: func(f *fakeYooKassa) { f.failNext("get", 503) }, err: gateway.ErrUnknownOutcome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			if tc.fault != nil {
				tc.fault(b.fake)
			}
			req := request(gateway.OpAuthorize, tc.token)
			res, err := b.gw.Authorize(ctx, req)
			b.requireClean(t, err, tc.token)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				if tc.err == gateway.ErrUnknownOutcome {
					require.NotErrorIs(t, err, gateway.ErrUnavailable, "an unknown outcome is never \"nothing done\"")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.status, res.Status, "status")
			require.Equal(t, tc.code, res.DeclineCode, "decline code")
			require.Equal(t, tc.hard, res.Hard, "hard")
			require.Equal(t, gateway.OpAuthorize, res.Op)
			require.Equal(t, req.IdempotencyKey, res.IdempotencyKey)
			require.Equal(t, int64(49900), res.Amount)
			require.Equal(t, "RUB", res.Currency)
			payments := b.fake.all()
			if tc.status == gateway.StatusFailed {
				require.Empty(t, payments)
				return
			}
			require.Len(t, payments, 1, "one payment")
			p := payments[0]
			require.Equal(t, p.ID, res.Reference)
			require.Equal(t, map[string]string{"rebill_charge_key": chargeKey, "rebill_gateway_key": req.IdempotencyKey}, p.Metadata)
			if tc.status == gateway.StatusSucceeded {
				require.Equal(t, "waiting_for_capture", p.Status)
				require.Equal(t, start.Add(7*24*time.Hour), res.ExpiresAt, "expires_at is returned")
			}
		})
	}

	t.Run("CurrencyNotAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := request(gateway.OpAuthorize, "pm_ok_1")
		req.Currency = "JPY"
		res, err := b.gw.Authorize(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "invalid_amount", res.DeclineCode)
		require.Empty(t, b.fake.received(), "nothing is sent with a guessed scale")
	})
}

// TestCaptureAnswers is the mapping of YooKassa's answers to a capture.
func TestCaptureAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before func(ctx context.Context, t *testing.T, b *testBundle, id string) string // returns the id to capture
		status gateway.Status
		code   string
		err    error
		paid   bool // the payment ends succeeded
	}{
		{name: "Captured", status: gateway.StatusSucceeded, paid: true},
		{name: "HoldExpired", before: func(_ context.Context, _ *testing.T, b *testBundle, id string) string {
			b.clock.Advance(7 * 24 * time.Hour)
			return id
		}, status: gateway.StatusFailed, code: "expired_on_capture"},
		{name: "JustBeforeExpiry", before: func(_ context.Context, _ *testing.T, b *testBundle, id string) string {
			b.clock.Advance(7*24*time.Hour - time.Second)
			return id
		}, status: gateway.StatusSucceeded, paid: true},
		{name: "Voided", before: func(ctx context.Context, t *testing.T, b *testBundle, id string) string {
			_, err := b.gw.Void(ctx, withPayment(request(gateway.OpVoid, ""), id))
			require.NoError(t, err)
			return id
		}, status: gateway.StatusFailed, code: "canceled_by_merchant"},
		{name: "CapturedBeforeKeyForgotten", before: func(ctx context.Context, t *testing.T, b *testBundle, id string) string {
			b.fake.loseNext("capture", 1)
			_, err := b.gw.Capture(ctx, withPayment(request(gateway.OpCapture, "pm_ok"), id))
			require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
			b.clock.Advance(25 * time.Hour) // the fake forgets the key; the capture is refused, the payment answers
			return id
		}, status: gateway.StatusSucceeded, paid: true},
		{name: "UnknownPayment", before: func(context.Context, *testing.T, *testBundle, string) string {
			return "2f6e4b1c-000f-5000-9000-1b2c3d4e5f60"
		}, status: gateway.StatusFailed, code: "payment_not_found"},
		{name: "Unavailable503", before: func(_ context.Context, _ *testing.T, b *testBundle, id string) string {
			b.fake.failNext("capture", 503)
			return id
		}, err: gateway.ErrUnavailable},
		{name: "Internal500", before: func(_ context.Context, _ *testing.T, b *testBundle, id string) string {
			b.fake.failNext("capture", 500)
			return id
		}, err: gateway.ErrUnknownOutcome},
		{name: "AnswerLost", before: func(_ context.Context, _ *testing.T, b *testBundle, id string) string {
			b.fake.loseNext("capture", 1)
			return id
		}, err: gateway.ErrUnknownOutcome, paid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			id := b.hold(ctx, t)
			target := id
			if tc.before != nil {
				target = tc.before(ctx, t, b, id)
			}
			req := withPayment(request(gateway.OpCapture, "pm_ok"), target)
			res, err := b.gw.Capture(ctx, req)
			b.requireClean(t, err, "pm_ok")
			require.Equal(t, tc.paid, b.fake.payment(id).Status == "succeeded", "payment captured")
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.status, res.Status)
			require.Equal(t, tc.code, res.DeclineCode)
			require.Equal(t, gateway.OpCapture, res.Op)
			require.Equal(t, target, res.Reference)
			require.Equal(t, req.IdempotencyKey, res.IdempotencyKey)
		})
	}
}

// TestCaptureRefused: a capture refused for the request itself leaves
// the hold uncaptured, and says so.
func TestCaptureRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := b.hold(ctx, t)
	over := withPayment(request(gateway.OpCapture, ""), id)
	over.Amount = 49901
	res, err := b.gw.Capture(ctx, over)
	require.NoError(t, err)
	require.Equal(t, gateway.StatusFailed, res.Status)
	require.Equal(t, "invalid_request", res.DeclineCode)
	require.Equal(t, "waiting_for_capture", b.fake.payment(id).Status)
}

// TestVoidAnswers is the mapping of YooKassa's answers to a void.
func TestVoidAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before func(ctx context.Context, t *testing.T, b *testBundle, id string)
		status gateway.Status
		code   string
		err    error
	}{
		{name: "Voided", status: gateway.StatusSucceeded},
		{name: "AlreadyVoided", before: func(ctx context.Context, t *testing.T, b *testBundle, id string) {
			b.fake.loseNext("cancel", 1)
			_, err := b.gw.Void(ctx, withPayment(request(gateway.OpVoid, ""), id))
			require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
			b.clock.Advance(25 * time.Hour)
		}, status: gateway.StatusSucceeded},
		{name: "Expired", before: func(_ context.Context, _ *testing.T, b *testBundle, _ string) {
			b.clock.Advance(8 * 24 * time.Hour)
		}, status: gateway.StatusSucceeded},
		{name: "Captured", before: func(ctx context.Context, t *testing.T, b *testBundle, id string) {
			_, err := b.gw.Capture(ctx, withPayment(request(gateway.OpCapture, ""), id))
			require.NoError(t, err)
		}, status: gateway.StatusFailed, code: "already_captured"},
		{name: "Unavailable503", before: func(_ context.Context, _ *testing.T, b *testBundle, _ string) {
			b.fake.failNext("cancel", 503)
		}, err: gateway.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			id := b.hold(ctx, t)
			if tc.before != nil {
				tc.before(ctx, t, b, id)
			}
			res, err := b.gw.Void(ctx, withPayment(request(gateway.OpVoid, ""), id))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Equal(t, "waiting_for_capture", b.fake.payment(id).Status)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.status, res.Status)
			require.Equal(t, tc.code, res.DeclineCode)
			require.Equal(t, id, res.Reference)
		})
	}
}

// TestReplayIsOneHold sends one authorize many times, some at once: one
// payment, and every answer names it.
func TestReplayIsOneHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req := request(gateway.OpAuthorize, "pm_ok_1")
	refs := make([]string, 8)
	var wg sync.WaitGroup
	for i := range refs {
		wg.Go(func() {
			res, err := b.gw.Authorize(ctx, req)
			if err == nil {
				refs[i] = res.Reference
			}
		})
	}
	wg.Wait()
	b.clock.Advance(23 * time.Hour)
	again, err := b.gw.Authorize(ctx, req)
	require.NoError(t, err)
	require.Len(t, b.fake.all(), 1, "one hold")
	for i, ref := range refs {
		require.Equal(t, again.Reference, ref, "answer %d", i)
	}

	other := req
	other.IdempotencyKey = chargeKey + ":a2:authorize"
	res, err := b.gw.Authorize(ctx, other)
	require.NoError(t, err)
	require.NotEqual(t, again.Reference, res.Reference, "a new key is a new payment")
	require.Len(t, b.fake.all(), 2)
}

// TestLookup recovers operations whose answers were lost.
func TestLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// lostHold sends an authorize whose answer is lost and returns the
	// request, sent at start.
	lostHold := func(t *testing.T, b *testBundle) gateway.Request {
		t.Helper()
		b.fake.loseNext("create", 1)
		req := request(gateway.OpAuthorize, "pm_ok_1")
		_, err := b.gw.Authorize(ctx, req)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		require.Len(t, b.fake.all(), 1, "the hold was placed")
		return req
	}
	lookup := func(b *testBundle, op gateway.Op, req gateway.Request) (gateway.Result, error) {
		return b.gw.Lookup(ctx, gateway.LookupRequest{Op: op, Request: req, SentAt: start, MayReplay: true})
	}

	t.Run("LostCreateReplayedWithin24h", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := lostHold(t, b)
		b.clock.Advance(23 * time.Hour)
		res, err := lookup(b, gateway.OpAuthorize, req)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, b.fake.all()[0].ID, res.Reference)
		require.Len(t, b.fake.all(), 1, "the replay made no second hold")
	})

	t.Run("LostCreateFoundByMetadataAfter24h", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := lostHold(t, b)
		// 150 other payments in the window: the match is on the second page.
		for i := range 150 {
			other := request(gateway.OpAuthorize, "pm_ok_2")
			other.ChargeKey = fmt.Sprintf("other:%d", i)
			other.IdempotencyKey = other.ChargeKey + ":a1:authorize"
			b.clock.Advance(time.Second)
			_, err := b.gw.Authorize(ctx, other)
			require.NoError(t, err)
		}
		b.clock.Advance(30 * time.Hour)
		posts := b.fake.posts()
		res, err := lookup(b, gateway.OpAuthorize, req)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, b.fake.all()[0].ID, res.Reference)
		require.Equal(t, req.IdempotencyKey, res.IdempotencyKey)
		require.Equal(t, posts, b.fake.posts(), "past 24 h nothing is sent again")
		require.Len(t, b.fake.all(), 151)
	})

	t.Run("ReplayRefusedFoundByMetadata", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.loseNext("create", 1)
		sent := request(gateway.OpAuthorize, "pm_ok_1")
		sent.Receipt = &gateway.Receipt{Customer: gateway.ReceiptCustomer{Phone: "79001234567"},
			Items: []gateway.ReceiptItem{{Description: "Gym", Quantity: "1", Amount: 49900, VATCode: 1}}}
		_, err := b.gw.Authorize(ctx, sent)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		asked := sent
		asked.Receipt = nil // not sent again the same way: YooKassa refuses the key
		res, err := lookup(b, gateway.OpAuthorize, asked)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, b.fake.all()[0].ID, res.Reference)
		require.Len(t, b.fake.all(), 1)
	})

	t.Run("ReplayOfABadRequestFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := lookup(b, gateway.OpAuthorize, request(gateway.OpAuthorize, "not_a_saved_method"))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "invalid_request", res.DeclineCode)
		require.Empty(t, b.fake.all())
	})

	t.Run("DeclineFoundByMetadataAfter24h", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.loseNext("create", 1)
		req := request(gateway.OpAuthorize, "pm_decline_card_expired")
		_, err := b.gw.Authorize(ctx, req)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		b.clock.Advance(25 * time.Hour)
		res, err := lookup(b, gateway.OpAuthorize, req)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusDeclined, res.Status)
		require.Equal(t, "card_expired", res.DeclineCode)
		require.True(t, res.Hard)
	})

	t.Run("NothingAfter24hIsUnprovable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.hold(ctx, t) // another attempt's payment is no match
		req := request(gateway.OpAuthorize, "pm_ok_1")
		req.IdempotencyKey = chargeKey + ":a2:authorize"
		b.clock.Advance(25 * time.Hour)
		_, err := lookup(b, gateway.OpAuthorize, req)
		require.ErrorIs(t, err, gateway.ErrUnprovable)
		require.Len(t, b.fake.all(), 1, "no payment was made to find out")
	})

	t.Run("ALookThatMayNotReplayPlacesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := request(gateway.OpAuthorize, "pm_ok_1") // its first send never arrived
		b.clock.Advance(time.Hour)
		_, err := b.gw.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, SentAt: start})
		require.ErrorIs(t, err, gateway.ErrUnprovable)
		require.Empty(t, b.fake.all(), "looking placed no hold")

		lost := lostHold(t, b) // one that arrived is found in the list
		res, err := b.gw.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: lost, SentAt: start})
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Len(t, b.fake.all(), 1)
	})

	t.Run("TwoPaymentsWithTheKeyIsUnprovable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := lostHold(t, b)
		b.clock.Advance(24 * time.Hour)
		_, err := b.gw.Authorize(ctx, req) // the key was forgotten: a second payment
		require.NoError(t, err)
		b.clock.Advance(time.Hour)
		_, err = lookup(b, gateway.OpAuthorize, req)
		require.ErrorIs(t, err, gateway.ErrUnprovable)
	})

	t.Run("LostCaptureFoundByPaymentID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.hold(ctx, t)
		capture := withPayment(request(gateway.OpCapture, "pm_ok_1"), id)
		_, err := lookup(b, gateway.OpCapture, capture)
		require.ErrorIs(t, err, gateway.ErrNotFound, "not captured yet")
		b.fake.loseNext("capture", 1)
		_, err = b.gw.Capture(ctx, capture)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		b.clock.Advance(30 * 24 * time.Hour)
		res, err := lookup(b, gateway.OpCapture, capture)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Equal(t, start, res.At, "captured when the lost call arrived")
		posts := b.fake.posts()
		_, err = b.gw.Capture(ctx, capture) // the pipeline's resend after its key expired
		require.NoError(t, err)
		require.Equal(t, "succeeded", b.fake.payment(id).Status)
		require.Equal(t, posts+1, b.fake.posts())
	})

	t.Run("ExpiredHoldAnswersExpiredOnCapture", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.hold(ctx, t)
		b.clock.Advance(8 * 24 * time.Hour)
		res, err := lookup(b, gateway.OpCapture, withPayment(request(gateway.OpCapture, ""), id))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "expired_on_capture", res.DeclineCode)
		void, err := lookup(b, gateway.OpVoid, withPayment(request(gateway.OpVoid, ""), id))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, void.Status, "a lapsed hold holds nothing")
	})

	t.Run("LostVoidFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.hold(ctx, t)
		void := withPayment(request(gateway.OpVoid, ""), id)
		_, err := lookup(b, gateway.OpVoid, void)
		require.ErrorIs(t, err, gateway.ErrNotFound)
		b.fake.loseNext("cancel", 1)
		_, err = b.gw.Void(ctx, void)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		res, err := lookup(b, gateway.OpVoid, void)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
	})

	t.Run("CaptureWithoutPaymentIDWasNeverSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := lookup(b, gateway.OpCapture, request(gateway.OpCapture, "pm_ok_1"))
		require.ErrorIs(t, err, gateway.ErrNotFound)
		require.Empty(t, b.fake.received())
	})
}

// TestProcessing: a 202 is waited out and sent again with the same key;
// a deadline that comes first leaves the outcome unknown, and the same
// key later finds the one payment.
func TestProcessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ThenSuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.gw.Authorize(ctx, request(gateway.OpAuthorize, "pm_slow_1"))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		reqs := b.fake.received()
		require.Len(t, reqs, 3, "202, 202, 200")
		for _, r := range reqs {
			require.Equal(t, reqs[0].Key, r.Key, "the same key")
			require.JSONEq(t, string(reqs[0].Body), string(r.Body), "the same body")
		}
		require.Len(t, b.fake.all(), 1)
	})

	t.Run("DeadlineFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.set(func(f *fakeYooKassa) { f.retryAfter = 5000 })
		short, cancel := context.WithTimeout(ctx, time.Second) // less than retry_after
		defer cancel()
		req := request(gateway.OpAuthorize, "pm_slow_1")
		_, err := b.gw.Authorize(short, req)
		require.ErrorIs(t, err, gateway.ErrUnknownOutcome)
		b.fake.set(func(f *fakeYooKassa) { f.retryAfter = 30 })
		res, err := b.gw.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, Request: req, SentAt: start, MayReplay: true})
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		require.Len(t, b.fake.all(), 1)
	})
}

// TestIdempotenceKey: every POST carries a key of at most 64 characters,
// the same for the same rebill key on every call, different otherwise.
func TestIdempotenceKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 300)
	require.LessOrEqual(t, len(yookassa.IdempotenceKey(long)), 64)
	require.Equal(t, yookassa.IdempotenceKey(long), yookassa.IdempotenceKey(long))
	// Pinned: a change would make every in-flight call after a deploy a
	// new payment.
	require.Equal(t, "48b1f29d-f5da-5af8-9b9b-1140ee7f612a", yookassa.IdempotenceKey(chargeKey+":a1:authorize"))
	require.NotEqual(t, yookassa.IdempotenceKey(chargeKey+":a1:authorize"), yookassa.IdempotenceKey(chargeKey+":a2:authorize"))

	ctx := context.Background()
	b := setup(t)
	auth := request(gateway.OpAuthorize, "pm_ok_1")
	res, err := b.gw.Authorize(ctx, auth)
	require.NoError(t, err)
	capture := withPayment(request(gateway.OpCapture, ""), res.Reference)
	_, err = b.gw.Capture(ctx, capture)
	require.NoError(t, err)
	second := request(gateway.OpAuthorize, "pm_ok_1")
	second.IdempotencyKey = chargeKey + ":a2:authorize"
	res2, err := b.gw.Authorize(ctx, second)
	require.NoError(t, err)
	id := res2.Reference
	void := withPayment(request(gateway.OpVoid, ""), id)
	void.IdempotencyKey = chargeKey + ":a2:void"
	_, err = b.gw.Void(ctx, void)
	require.NoError(t, err)
	posts := map[string]int{}
	want := map[string]string{
		"/v3/payments": yookassa.IdempotenceKey(auth.IdempotencyKey),
		"/v3/payments/" + res.Reference + "/capture": yookassa.IdempotenceKey(capture.IdempotencyKey),
		"/v3/payments/" + id + "/cancel":             yookassa.IdempotenceKey(void.IdempotencyKey),
	}
	for _, r := range b.fake.received() {
		if r.Method != http.MethodPost {
			continue
		}
		posts[r.Path]++
		if r.Path == "/v3/payments" && posts[r.Path] == 2 {
			require.Equal(t, yookassa.IdempotenceKey(second.IdempotencyKey), r.Key)
			continue
		}
		require.Equal(t, want[r.Path], r.Key, "%s", r.Path)
	}
	require.Equal(t, map[string]int{"/v3/payments": 2, "/v3/payments/" + res.Reference + "/capture": 1,
		"/v3/payments/" + id + "/cancel": 1}, posts)
}

// TestReceipt: the fiscal receipt goes with the hold and with the capture,
// each item's price exactly converted; YooKassa refuses items that do not
// add up to the amount.
func TestReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	receipt := &gateway.Receipt{
		Customer: gateway.ReceiptCustomer{Email: "anna@example.com"},
		Items: []gateway.ReceiptItem{
			{Description: "Gym, monthly", Quantity: "1", Amount: 45000, VATCode: 1, PaymentSubject: "service", PaymentMode: "full_payment"},
			{Description: "Towel", Quantity: "2", Amount: 2450, VATCode: 4, PaymentSubject: "commodity", PaymentMode: "full_payment"},
		},
		TaxSystemCode: 2,
	}
	wantReceipt := `{"customer":{"email":"anna@example.com"},"items":[
		{"description":"Gym, monthly","quantity":1,"amount":{"value":"450.00","currency":"RUB"},"vat_code":1,"payment_subject":"service","payment_mode":"full_payment"},
		{"description":"Towel","quantity":2,"amount":{"value":"24.50","currency":"RUB"},"vat_code":4,"payment_subject":"commodity","payment_mode":"full_payment"}],
		"tax_system_code":2}`

	t.Run("OnHoldAndCapture", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		auth := request(gateway.OpAuthorize, "pm_ok_1")
		auth.Receipt = receipt
		res, err := b.gw.Authorize(ctx, auth)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		capture := withPayment(request(gateway.OpCapture, ""), res.Reference)
		capture.Receipt = receipt
		res, err = b.gw.Capture(ctx, capture)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		p := b.fake.payment(res.Reference)
		require.JSONEq(t, wantReceipt, string(p.holdReceipt))
		require.JSONEq(t, wantReceipt, string(p.captureReceipt))
		require.Equal(t, fakeAmount{Value: "499.00", Currency: "RUB"}, p.Amount)
	})

	t.Run("AgentItemCarriesAgentTypeAndSupplier", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bill := &gateway.Receipt{Customer: gateway.ReceiptCustomer{Phone: "79001234567"}, Items: []gateway.ReceiptItem{{
			Description: "ЖКУ за 11.2026, ЛС 75ДА533315", Quantity: "1", Amount: 49900, VATCode: 1,
			PaymentSubject: "service", PaymentMode: "full_payment", AgentType: gateway.AgentPayment,
			Supplier: &gateway.ReceiptSupplier{Name: "ООО УК Дом", Phone: "74951234567", INN: "7701234567"}}}}
		auth := request(gateway.OpAuthorize, "pm_ok_1")
		auth.Receipt = bill
		res, err := b.gw.Authorize(ctx, auth)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		capture := withPayment(request(gateway.OpCapture, ""), res.Reference)
		capture.Receipt = bill
		res, err = b.gw.Capture(ctx, capture)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
		want := `{"customer":{"phone":"79001234567"},"items":[{"description":"ЖКУ за 11.2026, ЛС 75ДА533315","quantity":1,
			"amount":{"value":"499.00","currency":"RUB"},"vat_code":1,"payment_subject":"service","payment_mode":"full_payment",
			"agent_type":"payment_agent","supplier":{"name":"ООО УК Дом","phone":"74951234567","inn":"7701234567"}}]}`
		p := b.fake.payment(res.Reference)
		require.JSONEq(t, want, string(p.holdReceipt))
		require.JSONEq(t, want, string(p.captureReceipt))
	})

	t.Run("ItemsThatDoNotAddUpAreRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		auth := request(gateway.OpAuthorize, "pm_ok_1")
		auth.Amount = 49901
		auth.Receipt = receipt
		res, err := b.gw.Authorize(ctx, auth)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "invalid_request", res.DeclineCode)
		require.Empty(t, b.fake.all())
	})

	t.Run("BadQuantityIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		auth := request(gateway.OpAuthorize, "pm_ok_1")
		bad := *receipt
		bad.Items = []gateway.ReceiptItem{{Description: "Gym", Quantity: "1,5", Amount: 49900, VATCode: 1}}
		auth.Receipt = &bad
		res, err := b.gw.Authorize(ctx, auth)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "invalid_receipt", res.DeclineCode)
		require.Empty(t, b.fake.received())
	})
}

// TestOperations lists a day's holds, declines, captures and voids,
// oldest first.
func TestOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req := func(attempt int, token string) gateway.Request {
		r := request(gateway.OpAuthorize, token)
		r.IdempotencyKey = fmt.Sprintf("%s:a%d:authorize", chargeKey, attempt)
		return r
	}
	b.clock.Advance(-10 * time.Hour) // the day before, at 23:00
	_, err := b.gw.Authorize(ctx, req(9, "pm_ok_1"))
	require.NoError(t, err)
	b.clock.Advance(10 * time.Hour)
	declined, err := b.gw.Authorize(ctx, req(1, "pm_decline_insufficient_funds"))
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	held, err := b.gw.Authorize(ctx, req(2, "pm_ok_1"))
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	voided, err := b.gw.Authorize(ctx, req(3, "pm_ok_1"))
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	_, err = b.gw.Void(ctx, withPayment(request(gateway.OpVoid, ""), voided.Reference))
	require.NoError(t, err)
	_, err = b.gw.Capture(ctx, withPayment(request(gateway.OpCapture, ""), held.Reference))
	require.NoError(t, err)

	ops, err := b.gw.Operations(ctx, start.Add(3*time.Hour))
	require.NoError(t, err)
	var got []string
	for _, op := range ops {
		got = append(got, fmt.Sprintf("%s %s %s %s", op.Op, op.Status, op.Reference, op.IdempotencyKey))
	}
	require.Equal(t, []string{
		"authorize declined " + declined.Reference + " " + chargeKey + ":a1:authorize",
		"authorize succeeded " + held.Reference + " " + chargeKey + ":a2:authorize",
		"authorize succeeded " + voided.Reference + " " + chargeKey + ":a3:authorize",
		"void succeeded " + voided.Reference + " ",
		"capture succeeded " + held.Reference + " ",
	}, got)
}

// TestNew refuses a config it cannot use, naming the gateway and not the
// secret.
func TestNew(t *testing.T) {
	t.Parallel()
	for _, cfg := range []yookassa.Config{
		{Name: "yk", ShopID: "1"},
		{Name: "yk", SecretKey: "s3cr3t"},
		{Name: "yk", ShopID: "1", SecretKey: "s3cr3t", BaseURL: "ftp://api.yookassa.ru/v3"},
		{Name: "yk", ShopID: "1", SecretKey: "s3cr3t", BaseURL: "https://1:s3cr3t@api.yookassa.ru/v3"},
		{ShopID: "1", SecretKey: "s3cr3t"},
	} {
		_, err := yookassa.New(cfg)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
	g, err := yookassa.New(yookassa.Config{Name: "yk", ShopID: "1", SecretKey: "s3cr3t"})
	require.NoError(t, err)
	require.Equal(t, "yk", g.Name())
}
