package charges_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/vault"
)

// tokenReads counts the statements on payment_tokens of the pool it
// traces.
type tokenReads struct{ n atomic.Int32 }

func (r *tokenReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "payment_tokens") {
		r.n.Add(1)
	}
	return ctx
}

func (r *tokenReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// sealedCards are the test's cards sealed in the vault.
type sealedCards struct {
	current, next string // the references of currentCard and newCard
	reads         *tokenReads
}

// withVault seals currentCard and newCard and puts the vault's edge
// between the pipeline and the fake, wired as the service wires them: the
// fake gets the opened tokens, and reads counts what the edge read of
// payment_tokens itself (the pipeline's own statements are not counted).
func (b *testBundle) withVault(ctx context.Context, t *testing.T) sealedCards {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	_, err := rand.Read(key)
	require.NoError(t, err)
	keys, err := secrets.NewKeyring(key)
	require.NoError(t, err)
	cards := sealedCards{reads: &tokenReads{}}
	cfg := b.pool.Config()
	cfg.ConnConfig.Tracer = cards.reads
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	v := &vault.Vault{Pool: traced, Keys: keys}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if cards.current, err = v.Seal(ctx, tx, b.gateway.Name(), currentCard); err != nil {
			return err
		}
		cards.next, err = v.Seal(ctx, tx, b.gateway.Name(), newCard)
		return err
	}))
	b.pipeline.Gateways = fleet.New([]gateway.Gateway{v.Gateway(b.gateway)}, fleet.DefaultBreaker)
	b.pipeline.SealedToken = vault.SealedSQL("charges.pm_token")
	b.subs.update(func(s *charges.OwnerState) { s.Token = cards.current })
	return cards
}

// newSealedCharge is newCharge with the current card's reference, as
// charges hold it since the vault.
func (b *testBundle) newSealedCharge(ctx context.Context, t *testing.T, cards sealedCards) charges.Charge {
	t.Helper()
	c := b.newCharge(ctx, t, fixture{})
	_, err := b.pool.Exec(ctx, `UPDATE charges SET pm_token = $2 WHERE id = $1`, c.ID, cards.current)
	require.NoError(t, err)
	return c
}

// requireNoSealedTokenSent requires that no call handed the provider the
// sealed token: the edge takes it off.
func (b *testBundle) requireNoSealedTokenSent(t *testing.T) {
	t.Helper()
	for _, c := range b.gateway.Calls() {
		require.Empty(t, c.Request.Sealed, "%s %s", c.Op, c.Key)
	}
}

// The hold's "about to call" reads the sealed token with the charge, so
// the vault's edge sends the card's token without reading it: no
// statement on payment_tokens besides the pipeline's own.
func TestAuthorizeSendsTheTokenItsStartRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cards := b.withVault(ctx, t)
	c := b.newSealedCharge(ctx, t, cards)
	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	b.requireCalls(t, "authorize K:a1:authorize "+currentCard)
	b.requireNoSealedTokenSent(t)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
	require.Zero(t, cards.reads.n.Load(), "statements of the vault's edge on payment_tokens")
	require.NotContains(t, b.logs.String(), currentCard)
}

// A card changed while the hold was in flight: the declined attempt's
// next one starts with the new card's reference, and its "about to call"
// reads the new card's sealed token, which is the one sent.
func TestAuthorizeCardChangedInFlightSendsTheNewSealedCard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cards := b.withVault(ctx, t)
	c := b.newSealedCharge(ctx, t, cards)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})
	b.gateway.AuthorizeFunc = func(context.Context, gateway.Request) (gateway.Result, error) {
		b.changeCard(ctx, t, cards.next)
		return softDecline, nil
	}
	_, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	require.NoError(t, err)
	jobs := b.requireNextJobs(ctx, t, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 2})
	var token string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pm_token FROM charges WHERE id = $1`, c.ID).Scan(&token))
	require.Equal(t, cards.next, token, "the next attempt holds the new card's reference")

	b.gateway.AuthorizeFunc = gatewaytest.Answer(succeeded, nil)
	_, err = w.WorkJob(ctx, t, b.tx, jobs[0])
	require.NoError(t, err)
	b.requireCalls(t, "authorize K:a1:authorize "+currentCard, "authorize K:a2:authorize "+newCard)
	b.requireNoSealedTokenSent(t)
	require.Equal(t, charges.Authorized, b.get(ctx, t, c.ID).Status)
	require.Zero(t, cards.reads.n.Load(), "statements of the vault's edge on payment_tokens")
}
