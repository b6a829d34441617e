package notify_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/rebilltype"
)

// While a secret is rolled a receiver may hold either one: Verify accepts
// a header with one v1= per live secret under each of them, and under no
// other.
func TestVerifyAcceptsEitherOfTwoSecrets(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := "whsec_old0123456789abcdef0123456789abcdef0123456789ab", "whsec_new0123456789abcdef0123456789abcdef0123456789ab"
	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	at := time.Unix(1796112000, 0)
	header := notify.SignAll([]string{newSecret, oldSecret}, at, body)
	require.Equal(t, 2, strings.Count(header, "v1="))
	require.True(t, strings.HasPrefix(header, notify.Sign(newSecret, at, body)+",v1="), "the newest first")
	require.NoError(t, notify.Verify(newSecret, header, body, at, 5*time.Minute))
	require.NoError(t, notify.Verify(oldSecret, header, body, at, 5*time.Minute))
	require.ErrorIs(t, notify.Verify("whsec_other", header, body, at, 5*time.Minute), notify.ErrSignatureMismatch)
	require.ErrorIs(t, notify.Verify(oldSecret, header, []byte(`{"id":"evt_2"}`), at, 5*time.Minute), notify.ErrSignatureMismatch)
}

func (b deliveryBundle) roll(t *testing.T, id uuid.UUID, keepOld time.Duration) (notify.Endpoint, string) {
	t.Helper()
	var ep notify.Endpoint
	var secret string
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		ep, secret, err = b.webhooks.RollSecret(context.Background(), tx, id, keepOld)
		return err
	}))
	return ep, secret
}

// deliverOne publishes an event and returns the signature header of its
// delivery.
func deliverOne(t *testing.T, b deliveryBundle, rc *receiver) received {
	t.Helper()
	before := len(rc.requests())
	b.publish(t, "charge.succeeded")
	require.Eventually(t, func() bool { return len(rc.requests()) > before }, 10*time.Second, 10*time.Millisecond)
	return rc.requests()[before]
}

func verifies(r received, secret string) bool {
	return notify.Verify(secret, r.signature, r.body, time.Now(), 5*time.Minute) == nil
}

// A roll keeps the replaced secret signing for the time asked: deliveries
// carry both signatures, then only the new one once it expired; a second
// roll while the first secret still signs stops that one (two live at
// most); a roll with 0 stops the replaced secret at once.
func TestRolledSecretSignsUntilItExpires(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	id, first := b.endpoint(t, srv.URL, "*")

	ep, second := b.roll(t, id, time.Hour)
	require.NotEqual(t, first, second)
	require.True(t, strings.HasPrefix(second, "whsec_"))
	require.NotNil(t, ep.PreviousSecretExpiresAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *ep.PreviousSecretExpiresAt, time.Minute, "real time")
	got := deliverOne(t, b, rc)
	require.Equal(t, 2, strings.Count(got.signature, "v1="))
	require.True(t, verifies(got, first), "the old secret still verifies")
	require.True(t, verifies(got, second), "the new one does")

	_, third := b.roll(t, id, time.Hour)
	got = deliverOne(t, b, rc)
	require.Equal(t, 2, strings.Count(got.signature, "v1="), "at most two live secrets")
	require.False(t, verifies(got, first), "the first secret stopped at the second roll")
	require.True(t, verifies(got, second))
	require.True(t, verifies(got, third))

	// The replaced secret's time passes.
	_, err := b.pool.Exec(context.Background(), `UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
	got = deliverOne(t, b, rc)
	require.Equal(t, 1, strings.Count(got.signature, "v1="))
	require.False(t, verifies(got, second))
	require.True(t, verifies(got, third))

	ep, fourth := b.roll(t, id, 0)
	require.Nil(t, ep.PreviousSecretExpiresAt)
	got = deliverOne(t, b, rc)
	require.Equal(t, 1, strings.Count(got.signature, "v1="))
	require.False(t, verifies(got, third), "0 stops the replaced secret at once")
	require.True(t, verifies(got, fourth))

	var dump string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT string_agg(e::text, ' ') FROM webhook_endpoints e`).Scan(&dump))
	for _, s := range []string{first, second, third, fourth} {
		require.NotContains(t, dump, strings.TrimPrefix(s, "whsec_"), "secrets are stored sealed")
	}
}

// Concurrent rolls of one endpoint serialise on its row: whatever order
// they commit in, two secrets are live afterwards, the last committed one
// and the one it replaced, both among those the rolls returned.
func TestConcurrentRollsLeaveTwoLiveSecrets(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	id, first := b.endpoint(t, srv.URL, "*")
	var mu sync.Mutex
	returned := map[string]bool{first: true}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, s := b.roll(t, id, time.Hour)
			mu.Lock()
			returned[s] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, returned, 9)
	got := deliverOne(t, b, rc)
	require.Equal(t, 2, strings.Count(got.signature, "v1="))
	live := 0
	for s := range returned {
		if verifies(got, s) {
			live++
		}
	}
	require.Equal(t, 2, live)
}

func TestRollSecretRefusesBadExpiry(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	id, secret := b.endpoint(t, "http://127.0.0.1:9/hook", "*")
	for _, d := range []time.Duration{-time.Second, notify.MaxKeepOld + time.Second} {
		err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			_, _, err := b.webhooks.RollSecret(context.Background(), tx, id, d)
			return err
		})
		var fields rebilltype.Errors
		require.True(t, errors.As(err, &fields), "%s: %v", d, err)
		require.Equal(t, "expires_in", fields[0].Field)
	}
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, _, err := b.webhooks.RollSecret(context.Background(), tx, uuid.New(), time.Hour)
		return err
	})
	require.ErrorIs(t, err, notify.ErrEndpointNotFound)
	_, max := b.roll(t, id, notify.MaxKeepOld)
	require.NotEqual(t, secret, max)
}

// Rotating REBILL_ENCRYPTION_KEY seals the replaced secret again too.
func TestResealSecretsSealsTheRolledSecret(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	id, first := b.endpoint(t, "http://127.0.0.1:9/hook", "*")
	_, second := b.roll(t, id, time.Hour)
	newKey := []byte("fedcba9876543210fedcba9876543210")
	keys, err := secrets.NewKeyring(newKey, testKey)
	require.NoError(t, err)
	n, err := notify.ResealSecrets(context.Background(), b.pool, keys, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	only, err := secrets.NewKeyring(newKey)
	require.NoError(t, err)
	var current, previous string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT secret, previous_secret FROM webhook_endpoints WHERE id = $1`, id).
		Scan(&current, &previous))
	for sealed, want := range map[string]string{current: second, previous: first} {
		opened, err := only.Decrypt(sealed, id[:])
		require.NoError(t, err)
		require.Equal(t, want, string(opened))
	}
}
