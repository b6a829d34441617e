package e2e_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/secrets"
)

// dump is pg_dump of the test database: everything a stolen backup holds.
func (b testBundle) dump(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("pg_dump", "--no-owner", b.pool.Config().ConnString()).Output()
	require.NoError(t, err, "pg_dump")
	require.Contains(t, string(out), "payment_tokens", "the dump holds the vault")
	return string(out)
}

func TestDatabaseDumpHoldsNoTokenOrSecret(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ep := b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": "http://127.0.0.1:9/hooks", "events": []string{"*"}})
	whsec := ep["secret"].(string)
	require.True(t, strings.HasPrefix(whsec, "whsec_"))

	sub := b.createSubscription(t, "tok_ok_dumpcanary9876", "month")
	charge := b.waitCharges(t, sub, 1, "succeeded")[0]
	b.call(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method",
		map[string]any{"gateway": "sim1", "token": "tok_ok_dumpcanary5555", "exp_month": 12, "exp_year": 2035})
	declined := b.createSubscription(t, "tok_decline_funds_dumpcanary", "month")
	b.waitCharges(t, declined, 1, "declined")

	// The gateway got the token itself: the simulator keeps its last four.
	var last4 []string
	for _, e := range b.ledger(t, "sim1") {
		if strings.HasPrefix(e.IdempotencyKey, sub+":"+charge["period_key"].(string)) {
			last4 = append(last4, e.TokenLast4)
		}
	}
	require.Equal(t, []string{"9876", "9876"}, last4, "authorize and capture with the opened token")

	dump := b.dump(t)
	require.NotContains(t, dump, "dumpcanary", "a payment token is in the dump")
	require.NotContains(t, dump, strings.TrimPrefix(whsec, "whsec_"), "the webhook secret is in the dump")
	require.Contains(t, dump, "ptok_", "subscriptions and charges hold references")
}

func TestSecretsRotateCommand(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ep := b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": "http://127.0.0.1:9/hooks", "events": []string{"*"}})
	sub := b.createSubscription(t, "tok_ok_rotate", "month")
	b.waitCharges(t, sub, 1, "succeeded")

	// Rows written before the vault: a subscription's token in clear.
	legacy := b.createSubscription(t, "tok_ok_legacy", "month")
	b.waitCharges(t, legacy, 1, "succeeded")
	// The node of the old key is gone: its secrets_reseal job (run when it
	// becomes leader) would otherwise seal the rows below before the command.
	require.NoError(t, b.nodes[0].svc.River.Stop(t.Context()))
	_, err := b.pool.Exec(t.Context(), `UPDATE subscriptions SET pm_token = 'tok_ok_legacy' WHERE id = $1`, legacy)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE charges SET pm_token = 'tok_ok_legacy' WHERE subscription_id = $1`, legacy)
	require.NoError(t, err)

	raw := make([]byte, secrets.KeySize)
	_, err = rand.Read(raw)
	require.NoError(t, err)
	newKey := base64.StdEncoding.EncodeToString(raw)
	env := map[string]string{"DATABASE_URL": b.pool.Config().ConnString(), "REBILL_ENCRYPTION_KEY": newKey,
		"REBILL_ENCRYPTION_OLD_KEYS": testEncryptionKey, "REBILL_LOG_LEVEL": "warn"}
	getenv := func(k string) string { return env[k] }
	stdout, stderr, err := runCLI(t, getenv, "secrets", "rotate")
	require.NoError(t, err, stderr)
	require.Contains(t, stdout, "2 rows' payment tokens moved out of clear", "the subscription's and its charge's")
	require.Contains(t, stdout, "1 webhook secrets from old keys")
	require.Contains(t, stdout, "left: 0 payment tokens under old keys, 0 rows with a token in clear")
	again, _, err := runCLI(t, getenv, "secrets", "rotate")
	require.NoError(t, err)
	require.Contains(t, again, "0 rows' payment tokens moved out of clear, 0 payment tokens and 0 webhook secrets", "a second run has nothing to do")

	// Under the new key alone: the webhook secret opens, and a node
	// charges the next periods with the tokens.
	keys, err := secrets.NewKeyring(raw)
	require.NoError(t, err)
	var sealed string
	id := uuid.MustParse(strings.TrimPrefix(ep["id"].(string), "we_"))
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT secret FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed))
	secret, err := keys.Decrypt(sealed, id[:])
	require.NoError(t, err)
	require.Equal(t, ep["secret"], string(secret))

	fresh := startNode(t, b.pool, map[string]string{"REBILL_ENCRYPTION_KEY": newKey})
	b.nodes = []*node{fresh}
	b.advance(t, "744h")
	b.waitCharges(t, sub, 2, "succeeded")
	b.waitCharges(t, legacy, 2, "succeeded")
}

// A restart with a new key (the old one kept for reading) rotates by
// itself: the new leader runs the secrets_reseal job on start.
func TestNewKeyIsRolledOutOnStart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.call(t, http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": "http://127.0.0.1:9/hooks", "events": []string{"*"}})
	sub := b.createSubscription(t, "tok_ok_restart", "month")
	b.waitCharges(t, sub, 1, "succeeded")
	require.NoError(t, b.nodes[0].svc.River.Stop(t.Context()))

	raw := make([]byte, secrets.KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	b.nodes = []*node{startNode(t, b.pool, map[string]string{
		"REBILL_ENCRYPTION_KEY": base64.StdEncoding.EncodeToString(raw), "REBILL_ENCRYPTION_OLD_KEYS": testEncryptionKey})}
	newID := secrets.KeyID(raw)
	require.Eventually(t, func() bool {
		var old int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM payment_tokens WHERE key_id <> $1)
			+ (SELECT count(*) FROM webhook_endpoints WHERE NOT starts_with(secret, $1 || ':'))`, newID).Scan(&old))
		return old == 0
	}, 60*time.Second, 100*time.Millisecond)
	b.advance(t, "744h")
	b.waitCharges(t, sub, 2, "succeeded")
}
