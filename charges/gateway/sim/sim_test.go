package sim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// Tokens used by the tests. Each ends in a marker that must never show up
// in an error, a log line or an answer.
const (
	tokOK           = "tok_ok_secret4242"
	tokDeclineFunds = "tok_decline_funds_secret0001"
	tokDeclineHard  = "tok_decline_hard_secret0002"
	tokLost         = "tok_lost_response_secret0003"
	tokFlaky        = "tok_flaky_secret0004"
	tokUnknown      = "tok_nonsense_secret0005"
)

var allTokens = []string{tokOK, tokDeclineFunds, tokDeclineHard, tokLost, tokFlaky, tokUnknown}

type testBundle struct {
	pool  *pgxpool.Pool
	store *sim.Store
	root  string // the server's root URL
}

// setup starts a sim server hosting sim1 and sim2 on a fresh database, and
// checks when the test ends that its log never mentioned a token.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	require.NoError(t, sim.Migrate(context.Background(), pool))

	logs := &testsupport.LockedBuffer{}
	t.Cleanup(func() { requireNoToken(t, logs.String()) })
	ts := httptest.NewServer(sim.NewServer(pool, []string{"sim1", "sim2"}, zerolog.New(logs).Level(zerolog.DebugLevel)))
	t.Cleanup(ts.Close)
	return &testBundle{pool: pool, store: sim.NewStore(pool), root: ts.URL}
}

func (b *testBundle) client(name string, opts sim.ClientOptions) *sim.Client {
	return sim.NewClient(name, b.root+"/"+name, opts)
}

func (b *testBundle) ledger(t *testing.T, gw string) []sim.LedgerEntry {
	t.Helper()
	entries, err := b.store.Ledger(context.Background(), gw)
	require.NoError(t, err)
	return entries
}

func (b *testBundle) setFaults(t *testing.T, gw string, p sim.FaultsPatch) {
	t.Helper()
	_, err := b.store.SetFaults(context.Background(), gw, p)
	require.NoError(t, err)
}

func authorizeReq(key, token string, amount int64) gateway.Request {
	return gateway.Request{IdempotencyKey: key, Token: token, Amount: amount, Currency: "EUR", ChargeKey: "charge-" + key}
}

func settleReq(key string, auth gateway.Result) gateway.Request {
	return gateway.Request{IdempotencyKey: key, Amount: auth.Amount, Currency: auth.Currency, AuthorizationID: auth.Reference}
}

func requireNoToken(t *testing.T, text string) {
	t.Helper()
	require.NotContains(t, text, "secret", "a token leaked")
}

// requireErr checks that err wraps target and does not reveal a token.
func requireErr(t *testing.T, err, target error) {
	t.Helper()
	require.ErrorIs(t, err, target)
	requireNoToken(t, err.Error())
}

func ptr[T any](v T) *T { return &v }

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = sim.Migrate(ctx, pool) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, sim.Migrate(ctx, pool), "a second run is a no-op")
}

func TestIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("ReplayReturnsTheFirstResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()

		first, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 1999))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, first.Status)
		require.Equal(t, gateway.OpAuthorize, first.Op)
		require.True(t, strings.HasPrefix(first.Reference, "sim1_op_"), first.Reference)

		again, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 1999))
		require.NoError(t, err)
		require.Equal(t, first, again)

		entries := b.ledger(t, "sim1")
		require.Len(t, entries, 1)
		require.False(t, entries[0].ReceivedAt.IsZero())
		require.Equal(t, sim.LedgerEntry{
			Op: gateway.OpAuthorize, IdempotencyKey: "k1", Reference: first.Reference,
			TokenLast4: "4242", Amount: 1999, Currency: "EUR", Status: gateway.StatusSucceeded, At: first.At,
			ReceivedAt: entries[0].ReceivedAt,
		}, entries[0])
	})

	t.Run("ConcurrentCallsWithOneKeyMakeOneOperation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})

		results := make([]gateway.Result, 20)
		errs := make([]error, len(results))
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i], errs[i] = c.Authorize(context.Background(), authorizeReq("k1", tokOK, 500)) })
		}
		wg.Wait()
		for i := range results {
			require.NoError(t, errs[i])
			require.Equal(t, results[0], results[i])
		}
		require.Len(t, b.ledger(t, "sim1"), 1)
	})

	t.Run("KeyReusedForAnotherRequestIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()

		auth, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 100))
		require.NoError(t, err)

		_, err = c.Authorize(ctx, authorizeReq("k1", tokOK, 200))
		require.ErrorIs(t, err, gateway.ErrKeyReused)
		require.NotErrorIs(t, err, gateway.ErrUnavailable)
		require.NotErrorIs(t, err, gateway.ErrUnknownOutcome)
		requireNoToken(t, err.Error())

		_, err = c.Capture(ctx, settleReq("k1", auth))
		require.ErrorIs(t, err, gateway.ErrKeyReused)
		require.Len(t, b.ledger(t, "sim1"), 1)
	})

	// A hold asked again under its key with another card (a charge
	// restored from a backup after its customer changed cards) is refused
	// by the simulator as Stripe refuses it, and the client answers with
	// what the key did, looked up by the key: the one hold, never unknown.
	t.Run("KeyReusedWithAnotherCardAnswersTheKeysHold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()

		first, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 100))
		require.NoError(t, err)
		again, err := c.Authorize(ctx, authorizeReq("k1", "tok_ok_secret5555", 100))
		require.NoError(t, err)
		require.Equal(t, first.Reference, again.Reference)
		require.Equal(t, gateway.StatusSucceeded, again.Status)

		require.Len(t, b.ledger(t, "sim1"), 1)
	})

	t.Run("KeysAreScopedToAGateway", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()

		r1, err := b.client("sim1", sim.ClientOptions{}).Authorize(ctx, authorizeReq("k1", tokOK, 100))
		require.NoError(t, err)
		r2, err := b.client("sim2", sim.ClientOptions{}).Authorize(ctx, authorizeReq("k1", tokOK, 100))
		require.NoError(t, err)
		require.NotEqual(t, r1.Reference, r2.Reference)
		require.Len(t, b.ledger(t, "sim1"), 1)
		require.Len(t, b.ledger(t, "sim2"), 1)
	})
}

func TestTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		token       string
		status      gateway.Status
		declineCode string
		hard        bool
	}{
		{tokOK, gateway.StatusSucceeded, "", false},
		{tokDeclineFunds, gateway.StatusDeclined, "insufficient_funds", false},
		{tokDeclineHard, gateway.StatusDeclined, "stolen_card", true},
		{tokUnknown, gateway.StatusFailed, "invalid_token", false},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			t.Parallel()
			b := setup(t)

			res, err := b.client("sim1", sim.ClientOptions{}).Authorize(context.Background(), authorizeReq("k1", tt.token, 700))
			require.NoError(t, err, "declines and failures are results")
			require.Equal(t, tt.status, res.Status)
			require.Equal(t, tt.declineCode, res.DeclineCode)
			require.Equal(t, tt.hard, res.Hard)

			entries := b.ledger(t, "sim1")
			require.Len(t, entries, 1)
			require.Equal(t, tt.status, entries[0].Status)
			require.Equal(t, tt.declineCode, entries[0].DeclineCode)
			require.Equal(t, tt.token[len(tt.token)-4:], entries[0].TokenLast4)
		})
	}
}

func TestCaptureAndVoid(t *testing.T) {
	t.Parallel()

	authorize := func(t *testing.T, c *sim.Client, key, token string) gateway.Result {
		t.Helper()
		res, err := c.Authorize(context.Background(), authorizeReq(key, token, 2500))
		require.NoError(t, err)
		return res
	}

	t.Run("CaptureCollectsTheHoldOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()
		auth := authorize(t, c, "a1", tokOK)

		capReq := settleReq("c1", auth)
		capReq.Token = tokOK
		captured, err := c.Capture(ctx, capReq)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, captured.Status)
		require.Equal(t, gateway.OpCapture, captured.Op)
		require.Equal(t, int64(2500), captured.Amount)

		again, err := c.Capture(ctx, capReq)
		require.NoError(t, err)
		require.Equal(t, captured, again, "a replay returns the capture")

		second, err := c.Capture(ctx, settleReq("c2", auth))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, second.Status)
		require.Equal(t, "already_captured", second.DeclineCode)

		void, err := c.Void(ctx, settleReq("v1", auth))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, void.Status)
		require.Equal(t, "already_captured", void.DeclineCode)

		entries := b.ledger(t, "sim1")
		require.Len(t, entries, 4)
		require.Equal(t, "4242", entries[1].TokenLast4)
		require.Equal(t, "4242", entries[2].TokenLast4, "a capture without token shows the authorization's card")
	})

	t.Run("CaptureWithAnotherAmountFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		auth := authorize(t, c, "a1", tokOK)

		req := settleReq("c1", auth)
		req.Amount++
		res, err := c.Capture(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, res.Status)
		require.Equal(t, "invalid_authorization", res.DeclineCode)
	})

	t.Run("CaptureNeedsASucceededAuthorizationOfThisGateway", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()
		declined := authorize(t, c, "a1", tokDeclineFunds)
		other, err := b.client("sim2", sim.ClientOptions{}).Authorize(ctx, authorizeReq("a2", tokOK, 2500))
		require.NoError(t, err)

		for key, auth := range map[string]gateway.Result{
			"c1": declined,
			"c2": other,
			"c3": {Reference: "sim1_op_nope", Amount: 2500, Currency: "EUR"},
		} {
			res, err := c.Capture(ctx, settleReq(key, auth))
			require.NoError(t, err)
			require.Equal(t, gateway.StatusFailed, res.Status, key)
			require.Equal(t, "invalid_authorization", res.DeclineCode, key)
		}
	})

	t.Run("VoidReleasesTheHold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()
		auth := authorize(t, c, "a1", tokOK)

		void, err := c.Void(ctx, gateway.Request{IdempotencyKey: "v1", AuthorizationID: auth.Reference})
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, void.Status)
		require.Equal(t, auth.Amount, void.Amount, "a void records the hold's amount")

		captured, err := c.Capture(ctx, settleReq("c1", auth))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusFailed, captured.Status)
		require.Equal(t, "already_voided", captured.DeclineCode)
	})

	t.Run("ConcurrentCapturesSettleOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		auth := authorize(t, c, "a1", tokOK)

		results := make([]gateway.Result, 10)
		errs := make([]error, len(results))
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				results[i], errs[i] = c.Capture(context.Background(), settleReq("c"+string(rune('a'+i)), auth))
			})
		}
		wg.Wait()
		succeeded := 0
		for i, res := range results {
			require.NoError(t, errs[i])
			if res.Status == gateway.StatusSucceeded {
				succeeded++
			}
		}
		require.Equal(t, 1, succeeded)
	})
}

func TestLostResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	impatient := b.client("sim1", sim.ClientOptions{Timeout: 200 * time.Millisecond})
	ctx := context.Background()

	_, err := impatient.Authorize(ctx, authorizeReq("a1", tokLost, 3000))
	requireErr(t, err, gateway.ErrUnknownOutcome)

	entries := b.ledger(t, "sim1")
	require.Len(t, entries, 1)
	require.Equal(t, gateway.StatusSucceeded, entries[0].Status, "processed although never answered")

	auth, err := impatient.Lookup(ctx, lookupOf("a1"))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, auth.Status)
	require.Equal(t, entries[0].Reference, auth.Reference)

	_, err = impatient.Authorize(ctx, authorizeReq("a1", tokLost, 3000))
	requireErr(t, err, gateway.ErrUnknownOutcome)
	require.Len(t, b.ledger(t, "sim1"), 1, "a lost replay records nothing")

	// The capture is lost too, even sent without the token.
	_, err = impatient.Capture(ctx, settleReq("c1", auth))
	requireErr(t, err, gateway.ErrUnknownOutcome)
	captured, err := impatient.Lookup(ctx, lookupOf("c1"))
	require.NoError(t, err)
	require.Equal(t, gateway.OpCapture, captured.Op)
	require.Equal(t, gateway.StatusSucceeded, captured.Status)

	// A void answers.
	_, err = impatient.Authorize(ctx, authorizeReq("a2", tokLost, 3000))
	requireErr(t, err, gateway.ErrUnknownOutcome)
	auth2, err := impatient.Lookup(ctx, lookupOf("a2"))
	require.NoError(t, err)
	void, err := impatient.Void(ctx, gateway.Request{IdempotencyKey: "v2", AuthorizationID: auth2.Reference})
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, void.Status)
}

func TestFlaky(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()

	for range 2 {
		_, err := c.Authorize(ctx, authorizeReq("a1", tokFlaky, 100))
		requireErr(t, err, gateway.ErrUnavailable)
		require.Empty(t, b.ledger(t, "sim1"))
	}
	auth, err := c.Authorize(ctx, authorizeReq("a1", tokFlaky, 100))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, auth.Status)

	// Each operation's key starts over; the capture inherits the card.
	for range 2 {
		_, err := c.Capture(ctx, settleReq("c1", auth))
		requireErr(t, err, gateway.ErrUnavailable)
	}
	captured, err := c.Capture(ctx, settleReq("c1", auth))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, captured.Status)
	require.Len(t, b.ledger(t, "sim1"), 2)
}

func TestFaults(t *testing.T) {
	t.Parallel()

	t.Run("Down", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()
		auth, err := c.Authorize(ctx, authorizeReq("a0", tokOK, 100))
		require.NoError(t, err)

		b.setFaults(t, "sim1", sim.FaultsPatch{Down: ptr(true)})
		_, err = c.Authorize(ctx, authorizeReq("a1", tokOK, 100))
		requireErr(t, err, gateway.ErrUnavailable)
		_, err = c.Capture(ctx, settleReq("c1", auth))
		requireErr(t, err, gateway.ErrUnavailable)
		_, err = c.Lookup(ctx, lookupOf("a0"))
		requireErr(t, err, gateway.ErrUnavailable)
		_, err = c.Operations(ctx, time.Now())
		requireErr(t, err, gateway.ErrUnavailable)
		require.Len(t, b.ledger(t, "sim1"), 1, "the ledger stays readable and nothing was recorded")

		other, err := b.client("sim2", sim.ClientOptions{}).Authorize(ctx, authorizeReq("a1", tokOK, 100))
		require.NoError(t, err, "faults are per gateway")
		require.Equal(t, gateway.StatusSucceeded, other.Status)

		b.setFaults(t, "sim1", sim.FaultsPatch{Down: ptr(false)})
		res, err := c.Authorize(ctx, authorizeReq("a1", tokOK, 100))
		require.NoError(t, err)
		require.Equal(t, gateway.StatusSucceeded, res.Status)
	})

	t.Run("ErrorRate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.client("sim1", sim.ClientOptions{})
		ctx := context.Background()

		b.setFaults(t, "sim1", sim.FaultsPatch{ErrorRate: ptr(1.0)})
		for range 3 {
			_, err := c.Authorize(ctx, authorizeReq("a1", tokOK, 100))
			requireErr(t, err, gateway.ErrUnavailable)
		}
		require.Empty(t, b.ledger(t, "sim1"))
		_, err := c.Lookup(ctx, lookupOf("a1"))
		requireErr(t, err, gateway.ErrNotFound) // look-ups are not operations
	})

	t.Run("Latency", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		patient := b.client("sim1", sim.ClientOptions{Timeout: 2 * time.Second})

		b.setFaults(t, "sim1", sim.FaultsPatch{LatencyMS: ptr(100)})
		start := time.Now()
		_, err := patient.Authorize(ctx, authorizeReq("a1", tokOK, 100))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)

		impatient := b.client("sim1", sim.ClientOptions{Timeout: 50 * time.Millisecond})
		_, err = impatient.Authorize(ctx, authorizeReq("a2", tokOK, 100))
		requireErr(t, err, gateway.ErrUnknownOutcome)
		_, err = patient.Lookup(ctx, lookupOf("a2"))
		requireErr(t, err, gateway.ErrNotFound) // the sim gave up with its caller
	})

	t.Run("OverHTTP", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		post := func(body string) (int, sim.Faults) {
			resp, err := http.Post(b.root+"/sim1/faults", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			defer resp.Body.Close()
			var f sim.Faults
			if resp.StatusCode == http.StatusOK {
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
			}
			return resp.StatusCode, f
		}
		status, f := post(`{"latency_ms": 5, "error_rate": 0.25}`)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, sim.Faults{LatencyMS: 5, ErrorRate: 0.25}, f)
		status, f = post(`{"down": true}`)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, sim.Faults{Down: true, LatencyMS: 5, ErrorRate: 0.25}, f, "unsent switches keep their value")

		for _, bad := range []string{`{"error_rate": 1.5}`, `{"latency_ms": -1}`, `{"latency": 5}`} {
			status, _ = post(bad)
			require.Equal(t, http.StatusBadRequest, status, bad)
		}

		resp, err := http.Get(b.root + "/sim1/faults")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
		require.Equal(t, sim.Faults{Down: true, LatencyMS: 5, ErrorRate: 0.25}, f)
	})
}

func TestLookupAndOperations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()

	_, err := c.Lookup(ctx, lookupOf("never-sent"))
	requireErr(t, err, gateway.ErrNotFound)

	oddKey := "charge/42:authorize?x=1"
	first, err := c.Authorize(ctx, authorizeReq(oddKey, tokOK, 100))
	require.NoError(t, err)
	found, err := c.Lookup(ctx, lookupOf(oddKey))
	require.NoError(t, err)
	require.Equal(t, first, found)
	second, err := c.Authorize(ctx, authorizeReq("k2", tokDeclineHard, 100))
	require.NoError(t, err)

	today, err := c.Operations(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, []gateway.Result{first, second}, today)
	yesterday, err := c.Operations(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	require.Empty(t, yesterday)

	_, err = b.client("nope", sim.ClientOptions{}).Lookup(ctx, lookupOf(oddKey))
	require.ErrorContains(t, err, "404 unknown_gateway")
	require.NotErrorIs(t, err, gateway.ErrNotFound, "an unknown gateway must not pass for an unknown operation")
}

func TestLedgerEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()
	_, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 100))
	require.NoError(t, err)
	_, err = c.Authorize(ctx, authorizeReq("k2", tokDeclineFunds, 100))
	require.NoError(t, err)

	resp, err := http.Get(b.root + "/sim1/ledger")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Len(t, body.Data, 2)
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	base := []string{"op", "idempotency_key", "reference", "token_last4", "amount", "currency", "status", "at", "received_at"}
	require.ElementsMatch(t, base, keys(body.Data[0]))
	require.ElementsMatch(t, append(base, "decline_code"), keys(body.Data[1]))
	require.Equal(t, "k1", body.Data[0]["idempotency_key"], "oldest first")

	resp2, err := http.Get(b.root + "/nope/ledger")
	require.NoError(t, err)
	resp2.Body.Close()
	require.Equal(t, http.StatusNotFound, resp2.StatusCode)
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client("sim1", sim.ClientOptions{})
	ctx := context.Background()

	for name, req := range map[string]gateway.Request{
		"no key":      {Token: tokOK, Amount: 100, Currency: "EUR"},
		"no token":    {IdempotencyKey: "k1", Amount: 100, Currency: "EUR"},
		"no amount":   {IdempotencyKey: "k2", Token: tokOK, Currency: "EUR"},
		"no currency": {IdempotencyKey: "k3", Token: tokOK, Amount: 100},
	} {
		_, err := c.Authorize(ctx, req)
		require.ErrorContains(t, err, "400 invalid_request", name)
		requireNoToken(t, err.Error())
	}
	_, err := c.Void(ctx, gateway.Request{IdempotencyKey: "k4"})
	require.ErrorContains(t, err, "400 invalid_request")
	require.Empty(t, b.ledger(t, "sim1"))
}

// lookupOf names the operation sent under key: the simulator looks
// operations up by key alone.
func lookupOf(key string) gateway.LookupRequest { return gateway.ByKey("", key) }

// A store that caches its switches sees its own changes at once, and a
// change by another writer of the same database once the cache lapses,
// never later.
func TestCachedFaults(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	require.NoError(t, sim.Migrate(ctx, pool))
	const ttl = 300 * time.Millisecond
	cached, other := sim.NewStore(pool).CacheFaults(ttl), sim.NewStore(pool)

	f, err := cached.Faults(ctx, "sim1")
	require.NoError(t, err)
	require.False(t, f.Down)
	_, err = cached.SetFaults(ctx, "sim1", sim.FaultsPatch{Down: ptr(true)})
	require.NoError(t, err)
	f, err = cached.Faults(ctx, "sim1")
	require.NoError(t, err)
	require.True(t, f.Down, "its own change is seen at once")

	changed := time.Now()
	_, err = other.SetFaults(ctx, "sim1", sim.FaultsPatch{Down: ptr(false), LatencyMS: ptr(5)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		f, err := cached.Faults(ctx, "sim1")
		require.NoError(t, err)
		return !f.Down && f.LatencyMS == 5
	}, 5*time.Second, 10*time.Millisecond)
	require.Less(t, time.Since(changed), ttl+time.Second, "another writer's change is seen once the cache lapses")

	f, err = cached.Faults(ctx, "sim2")
	require.NoError(t, err)
	require.Equal(t, sim.Faults{}, f, "a gateway never configured has none")
}
