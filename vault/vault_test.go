package vault_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
	"github.com/rebill/rebill/vault"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return key
}

func newVault(t *testing.T, pool *pgxpool.Pool, key []byte, old ...[]byte) *vault.Vault {
	t.Helper()
	keys, err := secrets.NewKeyring(key, old...)
	require.NoError(t, err)
	return &vault.Vault{Pool: pool, Keys: keys,
		Holders: []vault.TokenHolder{subscriptions.Tokens(), charges.Tokens(), enrollments.Tokens()}}
}

func seal(t *testing.T, v *vault.Vault, gw, token string) string {
	t.Helper()
	var ref string
	require.NoError(t, pgx.BeginFunc(t.Context(), v.Pool, func(tx pgx.Tx) (err error) {
		ref, err = v.Seal(t.Context(), tx, gw, token)
		return err
	}))
	return ref
}

func open(t *testing.T, v *vault.Vault, ref string) string {
	t.Helper()
	token, err := v.Open(t.Context(), v.Pool, ref)
	require.NoError(t, err)
	return token
}

// tableText is every row of payment_tokens as text: what a dump shows.
func tableText(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var text string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(p::text, E'\n'), '') FROM payment_tokens p`).Scan(&text))
	return text
}

func TestSealKeepsOneReferencePerCard(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	v := newVault(t, pool, newKey(t))

	ref := seal(t, v, "sim1", "tok_ok_secret_4242")
	require.True(t, vault.IsRef(ref), ref)
	require.Equal(t, ref, seal(t, v, "sim1", "tok_ok_secret_4242"), "the same card keeps its reference")
	require.NotEqual(t, ref, seal(t, v, "sim2", "tok_ok_secret_4242"), "a token is a card only at its gateway")
	require.NotEqual(t, ref, seal(t, v, "sim1", "tok_ok_secret_4243"))
	require.Equal(t, "tok_ok_secret_4242", open(t, v, ref))
	require.NotContains(t, tableText(t, pool), "secret_4242")

	t.Run("a value that is no reference is a token in clear", func(t *testing.T) {
		require.Equal(t, "tok_legacy", open(t, v, "tok_legacy"))
	})
	t.Run("an unknown reference is an error", func(t *testing.T) {
		_, err := v.Open(t.Context(), pool, "ptok_00000000-0000-4000-8000-000000000000")
		require.ErrorIs(t, err, vault.ErrNotFound)
	})
	t.Run("another key opens nothing", func(t *testing.T) {
		_, err := newVault(t, pool, newKey(t)).Open(t.Context(), pool, ref)
		require.Error(t, err)
	})
	t.Run("a ciphertext copied to another row does not open", func(t *testing.T) {
		other := seal(t, v, "sim1", "tok_other")
		_, err := pool.Exec(t.Context(), `UPDATE payment_tokens SET ciphertext = (SELECT ciphertext FROM payment_tokens WHERE id = $1)
			WHERE id = $2`, ref, other)
		require.NoError(t, err)
		_, err = v.Open(t.Context(), pool, other)
		require.Error(t, err)
	})
}

func TestConcurrentSealsOfOneCardAgree(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	v := newVault(t, pool, newKey(t))
	refs := make([]string, 4)
	var wg sync.WaitGroup
	for i := range refs {
		wg.Go(func() { refs[i] = seal(t, v, "sim1", "tok_race") })
	}
	wg.Wait()
	for _, ref := range refs {
		require.Equal(t, refs[0], ref)
	}
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM payment_tokens`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestRotation(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	oldKey, newKey_ := newKey(t), newKey(t)
	before := newVault(t, pool, oldKey)
	refs := map[string]string{}
	for _, tok := range []string{"tok_a", "tok_b", "tok_c", "tok_d", "tok_e"} {
		refs[tok] = seal(t, before, "sim1", tok)
	}

	during := newVault(t, pool, newKey_, oldKey)
	for tok, ref := range refs {
		require.Equal(t, tok, open(t, during, ref), "old keys still open")
	}
	require.Equal(t, refs["tok_a"], seal(t, during, "sim1", "tok_a"), "a card sealed under the old key keeps its reference")

	t.Run("without the old key nothing moves and the key is named", func(t *testing.T) {
		_, err := newVault(t, pool, newKey_).ResealTokens(t.Context(), 10)
		require.ErrorContains(t, err, secrets.KeyID(oldKey))
	})

	// Two runs at once, one token per transaction, the first stopped
	// after one batch: resumable, and they share the work.
	n, err := during.ResealTokens(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := vault.RunSteps(context.Background(), []vault.Step{{Kind: "payment_token", Run: during.ResealTokens}}, 1)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	old, clear, err := during.Remaining(t.Context())
	require.NoError(t, err)
	require.Zero(t, old)
	require.Zero(t, clear)
	n, err = during.ResealTokens(t.Context(), 10)
	require.NoError(t, err)
	require.Zero(t, n, "a finished rotation does nothing")

	after := newVault(t, pool, newKey_) // the old key dropped
	for tok, ref := range refs {
		require.Equal(t, tok, open(t, after, ref))
	}
	require.Equal(t, refs["tok_b"], seal(t, after, "sim1", "tok_b"), "the fingerprint moved to the new key")
}

func TestSealClearMovesTokensOutOfTheTables(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := t.Context()
	v := newVault(t, pool, newKey(t))
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	subs := subscriptions.NewStore(testsupport.NewClock(now))

	// Rows as written before the vault: tokens in clear, a card shared by
	// two subscriptions, a charge on a card its subscription left since.
	var ids []subscriptions.Subscription
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, tok := range []string{"tok_clear_1", "tok_clear_1", "tok_clear_2"} {
			sub, err := subs.Create(ctx, tx, subscriptions.New{CustomerID: "c1", Amount: 100, Currency: "USD",
				Interval: period.Month, IntervalCount: 1, TimeZone: "UTC",
				PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: tok, ExpMonth: 12, ExpYear: 2035}}, subscriptions.System, nil)
			if err != nil {
				return err
			}
			ids = append(ids, sub)
		}
		_, err := (&charges.Store{Queue: insertOnly(t, pool)}).Create(ctx, tx, []charges.New{
			{SubscriptionID: ids[0].ID, CustomerID: "c1", PeriodKey: "p1", PeriodStart: now, Amount: 100, Currency: "USD", Gateway: "sim1", Token: "tok_clear_1"},
			{SubscriptionID: ids[2].ID, CustomerID: "c1", PeriodKey: "p1", PeriodStart: now, Amount: 100, Currency: "USD", Gateway: "sim1", Token: "tok_clear_old"},
		}, now)
		return err
	}))
	_, clear, err := v.Remaining(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, clear)

	counts, err := vault.RunSteps(ctx, []vault.Step{{Kind: "clear_token", Run: v.SealClear}}, 1)
	require.NoError(t, err)
	require.Equal(t, 5, counts["clear_token"], "rows changed")
	_, clear, err = v.Remaining(ctx)
	require.NoError(t, err)
	require.Zero(t, clear)

	tokenOf := func(query string, id any) string {
		var ref string
		require.NoError(t, pool.QueryRow(ctx, query, id).Scan(&ref))
		require.True(t, vault.IsRef(ref), ref)
		return open(t, v, ref)
	}
	require.Equal(t, "tok_clear_1", tokenOf(`SELECT pm_token FROM subscriptions WHERE id = $1`, ids[0].ID))
	require.Equal(t, "tok_clear_1", tokenOf(`SELECT pm_token FROM subscriptions WHERE id = $1`, ids[1].ID))
	require.Equal(t, "tok_clear_2", tokenOf(`SELECT pm_token FROM subscriptions WHERE id = $1`, ids[2].ID))
	require.Equal(t, "tok_clear_1", tokenOf(`SELECT pm_token FROM charges WHERE subscription_id = $1`, ids[0].ID))
	require.Equal(t, "tok_clear_old", tokenOf(`SELECT pm_token FROM charges WHERE subscription_id = $1`, ids[2].ID))
	var same bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT pm_token FROM subscriptions WHERE id = $1) = (SELECT pm_token FROM charges WHERE subscription_id = $1)`,
		ids[0].ID).Scan(&same))
	require.True(t, same, "a charge and its subscription on one card hold one reference: same-card rules still compare them")
}

// An enrollment written as migration 00006 wrote it, before the vault,
// holds its token in clear; the secrets_reseal job seals it, and the bill
// charge of the same card gets the same reference.
func TestResealJobSealsEnrollmentTokensInClear(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := t.Context()
	v := newVault(t, pool, newKey(t))
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var enrollmentID string
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO enrollments (id, customer_id, kind, els, status, currency, max_amount,
			pm_gateway, pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES (gen_random_uuid(), 'c1', 'housing', '1234567890', 'active', 'RUB', 500000,
			'sim1', 'tok_enrollment_legacy', 12, 2035, $1, $1) RETURNING id::text`, now).Scan(&enrollmentID))
	var charged string
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sub, err := subscriptions.NewStore(testsupport.NewClock(now)).Create(ctx, tx, subscriptions.New{CustomerID: "c1", Amount: 100, Currency: "RUB",
			Interval: period.Month, IntervalCount: 1, TimeZone: "UTC",
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_enrollment_legacy", ExpMonth: 12, ExpYear: 2035}}, subscriptions.System, nil)
		charged = sub.ID.String()
		return err
	}))
	_, clear, err := v.Remaining(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, clear, "the enrollment's row counts")

	worker := &vault.ResealWorker{Steps: []vault.Step{{Kind: "clear_token", Run: v.SealClear}}, Batch: 1}
	require.NoError(t, worker.Work(ctx, nil))

	_, clear, err = v.Remaining(ctx)
	require.NoError(t, err)
	require.Zero(t, clear)
	var enrollmentRef, subscriptionRef string
	require.NoError(t, pool.QueryRow(ctx, `SELECT pm_token FROM enrollments WHERE id = $1`, enrollmentID).Scan(&enrollmentRef))
	require.NoError(t, pool.QueryRow(ctx, `SELECT pm_token FROM subscriptions WHERE id = $1`, charged).Scan(&subscriptionRef))
	require.True(t, vault.IsRef(enrollmentRef), "sealed: %s", enrollmentRef)
	require.Equal(t, "tok_enrollment_legacy", open(t, v, enrollmentRef))
	require.Equal(t, subscriptionRef, enrollmentRef, "one card, one reference")
	var dump string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(e::text, ' ') FROM enrollments e`).Scan(&dump))
	require.NotContains(t, dump, "tok_enrollment_legacy")
}

// recording is a provider that takes every authorize and look-up, for
// the test to read what each was sent.
func recording(t *testing.T) *gatewaytest.Gateway {
	g := gatewaytest.New(t, "sim1")
	g.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded}, nil)
	g.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{Status: gateway.StatusSucceeded}, nil)
	return g
}

// tokens lists the tokens g's calls of op carried, in order.
func tokens(g *gatewaytest.Gateway, op gateway.Op) []string {
	var out []string
	for _, c := range g.CallsOf(op) {
		out = append(out, c.Request.Token)
	}
	return out
}

// A provider finds a lost hold by sending its create again under the same
// key, which it answers only for the same request: the replay carries the
// card's token, as the first send did. A look that may not replay, or
// looks for a capture, never has the token opened.
func TestLookupThatMayReplayAHoldGetsTheToken(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	v := newVault(t, pool, newKey(t))
	inner := recording(t)
	g := v.Gateway(inner)
	ref := seal(t, v, "sim1", "tok_ok_replayed")
	for _, look := range []gateway.LookupRequest{
		{Op: gateway.OpAuthorize, MayReplay: true, Request: gateway.Request{Token: ref}},
		{Op: gateway.OpAuthorize, Request: gateway.Request{Token: ref}},
		{Op: gateway.OpCapture, MayReplay: true, Request: gateway.Request{Token: ref}},
	} {
		_, err := g.Lookup(t.Context(), look)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"tok_ok_replayed", ref, ref}, tokens(inner, gatewaytest.OpLookup))
}

func TestGatewayGetsTheToken(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	v := newVault(t, pool, newKey(t))
	inner := recording(t)
	g := v.Gateway(inner)
	ref := seal(t, v, "sim1", "tok_ok_for_the_gateway")
	_, err := g.Authorize(t.Context(), gateway.Request{Token: ref})
	require.NoError(t, err)
	_, err = g.Authorize(t.Context(), gateway.Request{Token: "tok_still_clear"})
	require.NoError(t, err)
	_, err = g.Authorize(t.Context(), gateway.Request{Token: "ptok_00000000-0000-4000-8000-000000000000"})
	require.ErrorIs(t, err, vault.ErrNotFound)
	sent := tokens(inner, gateway.OpAuthorize)
	require.Equal(t, []string{"tok_ok_for_the_gateway", "tok_still_clear"}, sent, "nothing is sent for a token that cannot be opened")
	require.False(t, strings.HasPrefix(sent[0], "ptok_"))
}

func TestIsRef(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"ptok_0190a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b":   true,
		"ptok_0190A4B2-1C3D-7E4F-8A9B-0C1D2E3F4A5B":   false, // not as Seal writes it: a token
		"ptok_{0190a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b}": false,
		"ptok_0190a4b21c3d7e4f8a9b0c1d2e3f4a5b":       false,
		"tok_ok":                                      false,
		"":                                            false,
	} {
		require.Equal(t, want, vault.IsRef(v), v)
	}
}

// statementCounter counts the statements that name payment_tokens.
type statementCounter struct{ n atomic.Int32 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "payment_tokens") {
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// counted is a pool on pool's database whose statements on payment_tokens
// reads counts.
func counted(t *testing.T, pool *pgxpool.Pool, reads *statementCounter) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = reads
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	return traced
}

// sealedOf is what vault.SealedSQL yields for ref, as the statement that
// starts an attempt reads it.
func sealedOf(t *testing.T, pool *pgxpool.Pool, ref string) string {
	t.Helper()
	var sealed *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT `+vault.SealedSQL("$1::text"), ref).Scan(&sealed))
	require.NotNil(t, sealed, "no sealed token for %s", ref)
	return *sealed
}

// A hold whose "about to call" read the sealed token with its charge is
// opened from it at the edge, with no statement of its own; one read for
// another card, another gateway or under another key is refused before
// anything is sent. Without it the edge reads the token, as before.
func TestGatewayOpensASealedTokenWithoutARead(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	reads := &statementCounter{}
	key := newKey(t)
	v := newVault(t, counted(t, pool, reads), key)
	inner := recording(t)
	g := v.Gateway(inner)
	ref := seal(t, v, "sim1", "tok_ok_sealed_4242")
	other := seal(t, v, "sim1", "tok_ok_other_card")
	sealed := sealedOf(t, pool, ref)
	require.NotContains(t, sealed, "4242")
	reads.n.Store(0)

	// send authorizes req through g and returns the token and sealed
	// token the provider got, and how many tokens the edge read.
	send := func(t *testing.T, g gateway.Gateway, req gateway.Request) (gateway.Request, int32, error) {
		before, calls := reads.n.Load(), len(inner.CallsOf(gateway.OpAuthorize))
		_, err := g.Authorize(t.Context(), req)
		got := inner.CallsOf(gateway.OpAuthorize)
		if err != nil {
			require.Len(t, got, calls, "nothing is sent for a token that cannot be opened")
			return gateway.Request{}, reads.n.Load() - before, err
		}
		require.Len(t, got, calls+1)
		return got[calls].Request, reads.n.Load() - before, nil
	}

	t.Run("a sealed token opens without a read", func(t *testing.T) {
		req, n, err := send(t, g, gateway.Request{Token: ref, Sealed: sealed})
		require.NoError(t, err)
		require.Equal(t, "tok_ok_sealed_4242", req.Token)
		require.Empty(t, req.Sealed, "the provider never gets the sealed token")
		require.Zero(t, n, "statements on payment_tokens")
	})
	t.Run("a sealed token read for another card is refused", func(t *testing.T) {
		_, n, err := send(t, g, gateway.Request{Token: other, Sealed: sealed})
		require.Error(t, err)
		require.NotContains(t, err.Error(), sealed)
		require.Zero(t, n)
	})
	t.Run("a sealed token bound to another gateway is refused", func(t *testing.T) {
		var row [2]string
		require.NoError(t, json.Unmarshal([]byte(sealed), &row))
		require.Equal(t, "sim1", row[0])
		row[0] = "sim2"
		moved, err := json.Marshal(row)
		require.NoError(t, err)
		_, _, err = send(t, g, gateway.Request{Token: ref, Sealed: string(moved)})
		require.Error(t, err)
	})
	t.Run("another key opens nothing", func(t *testing.T) {
		_, _, err := send(t, newVault(t, v.Pool, newKey(t)).Gateway(inner), gateway.Request{Token: ref, Sealed: sealed})
		require.Error(t, err)
	})
	t.Run("a malformed sealed token is refused", func(t *testing.T) {
		_, _, err := send(t, g, gateway.Request{Token: ref, Sealed: "not sealed"})
		require.ErrorContains(t, err, "malformed sealed token")
	})
	t.Run("without a sealed token the edge reads it", func(t *testing.T) {
		req, n, err := send(t, g, gateway.Request{Token: ref})
		require.NoError(t, err)
		require.Equal(t, "tok_ok_sealed_4242", req.Token)
		require.Equal(t, int32(1), n)
	})
	t.Run("a token in clear passes as is", func(t *testing.T) {
		req, n, err := send(t, g, gateway.Request{Token: "tok_still_clear"})
		require.NoError(t, err)
		require.Equal(t, "tok_still_clear", req.Token)
		require.Zero(t, n)
	})
	t.Run("look-ups open the sealed token only to replay a hold", func(t *testing.T) {
		before := reads.n.Load()
		for _, look := range []gateway.LookupRequest{
			{Op: gateway.OpAuthorize, MayReplay: true, Request: gateway.Request{Token: ref, Sealed: sealed}},
			{Op: gateway.OpAuthorize, Request: gateway.Request{Token: ref, Sealed: sealed}},
		} {
			_, err := g.Lookup(t.Context(), look)
			require.NoError(t, err)
		}
		looks := inner.CallsOf(gatewaytest.OpLookup)
		require.Len(t, looks, 2)
		require.Equal(t, "tok_ok_sealed_4242", looks[0].Lookup.Request.Token)
		require.Equal(t, ref, looks[1].Lookup.Request.Token)
		for _, look := range looks {
			require.Empty(t, look.Lookup.Request.Sealed, "the provider never gets the sealed token")
		}
		require.Equal(t, before, reads.n.Load())
	})
	t.Run("no sealed token for a token in clear or an unknown reference", func(t *testing.T) {
		for _, token := range []string{"tok_still_clear", "ptok_00000000-0000-4000-8000-000000000000"} {
			var got *string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT `+vault.SealedSQL("$1::text"), token).Scan(&got))
			require.Nil(t, got, token)
		}
	})
}

// A seal queued on a caller's batch keeps one reference per card as Seal
// does. One that waited on a concurrent seal of the same card finds no
// row in its batch and reads the reference the other committed, with one
// more statement.
func TestQueuedSealKeepsOneReferencePerCard(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	reads := &statementCounter{}
	v := newVault(t, counted(t, pool, reads), newKey(t))
	queued := func(ctx context.Context, tx pgx.Tx, token string) (string, error) {
		b := &pgx.Batch{}
		s, err := v.QueueSeal(b, "sim1", token)
		if err != nil {
			return "", err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return "", err
		}
		return s.Ref(ctx, tx)
	}
	var first string
	require.NoError(t, pgx.BeginFunc(t.Context(), v.Pool, func(tx pgx.Tx) (err error) {
		first, err = queued(t.Context(), tx, "tok_queued")
		return err
	}))
	require.True(t, vault.IsRef(first), first)
	require.Equal(t, first, seal(t, v, "sim1", "tok_queued"))
	require.Equal(t, "tok_queued", open(t, v, first))

	t.Run("a reference read before the batch was sent is an error", func(t *testing.T) {
		s, err := v.QueueSeal(&pgx.Batch{}, "sim1", "tok_unsent")
		require.NoError(t, err)
		_, err = s.Ref(t.Context(), pool)
		require.Error(t, err)
	})

	t.Run("after a concurrent seal of the same card", func(t *testing.T) {
		winner, err := v.Pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = winner.Rollback(context.Background()) }()
		won, err := v.Seal(t.Context(), winner, "sim1", "tok_raced")
		require.NoError(t, err)

		reads.n.Store(0)
		done := make(chan struct{})
		var lost string
		var lostErr error
		go func() {
			defer close(done)
			lostErr = pgx.BeginFunc(context.Background(), v.Pool, func(tx pgx.Tx) (err error) {
				lost, err = queued(context.Background(), tx, "tok_raced")
				return err
			})
		}()
		require.Eventually(t, func() bool { // the queued seal waits on the winner's row
			var waiting bool
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
			return waiting
		}, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, winner.Commit(t.Context()))
		<-done
		require.NoError(t, lostErr)
		require.Equal(t, won, lost, "the winner's reference")
		require.EqualValues(t, 1, reads.n.Load(), "read by one more statement")
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM payment_tokens WHERE id = $1`, won).Scan(&n))
		require.Equal(t, 1, n)
	})
}
