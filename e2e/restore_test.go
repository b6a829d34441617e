package e2e_test

// What a database that lost its last minutes (a failover with asynchronous
// replication, a restore from a backup) must not do: charge twice what the
// gateway already did in the minutes it forgot. The lost window is
// reproduced by deleting exactly the rows it would lose, while the
// simulated gateway keeps its own books, as the outside world does.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// postWithKey sends an authenticated POST under the Idempotency-Key key.
func (b testBundle) postWithKey(t *testing.T, path, key string, body any) (int, map[string]any) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, b.url()+path, bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// forgetSubscription deletes what the database would lose if it were
// restored to just before the subscription's creation: the subscription,
// its charges, their events and jobs, and the request's idempotency
// record.
func (b testBundle) forgetSubscription(t *testing.T, subID, key string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`DELETE FROM river_job WHERE args->>'charge_id' IN (SELECT id::text FROM charges WHERE subscription_id = $1)`,
			`DELETE FROM events WHERE object_id = $1 OR parent_id = $1`,
			`DELETE FROM charges WHERE subscription_id = $1`,
			`DELETE FROM subscription_events WHERE subscription_id = $1`,
			`DELETE FROM subscriptions WHERE id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, subID); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE key = $1`, key)
		return err
	}))
}

// A subscription created, charged and captured in the minutes a restore
// lost, created again by the client's retry under the same Idempotency-Key,
// is the same subscription: its first period's charge asks the gateway
// under the keys it already answered, and the gateway's ledger shows one
// hold and one capture.
func TestSubscriptionCreatedAgainAfterARestoreIsChargedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	key := "restore-create-" + t.Name()
	body := subscriptionBody("tok_ok_restore", "month")
	status, created := b.postWithKey(t, "/v1/subscriptions", key, body)
	require.Equal(t, http.StatusCreated, status, "%v", created)
	subID := created["id"].(string)
	first := b.waitCharges(t, subID, 1, "succeeded")
	chargeKey := subID + ":" + b.clockNow(t).UTC().Format("2006-01-02")
	require.Equal(t, []string{"a1:authorize:succeeded:tore", "a1:capture:succeeded:tore"}, b.gatewayOps(t, "sim1", chargeKey))

	b.forgetSubscription(t, subID, key)
	status, again := b.postWithKey(t, "/v1/subscriptions", key, body)
	require.Equal(t, http.StatusCreated, status, "%v", again)
	require.Equal(t, subID, again["id"], "the retry creates the subscription it created before")
	second := b.waitCharges(t, subID, 1, "succeeded")
	require.NotEqual(t, first[0]["id"], second[0]["id"], "the charge itself was forgotten and made again")

	captures := 0
	for _, e := range b.ledger(t, "sim1") {
		if e.Op == "capture" && e.Status == "succeeded" {
			captures++
		}
	}
	require.Equal(t, 1, captures, "the gateway captured the period once")
	require.Equal(t, []string{"a1:authorize:succeeded:tore", "a1:capture:succeeded:tore"}, b.gatewayOps(t, "sim1", chargeKey))
}

// A key whose stored response has expired, sent again for a creation, is
// refused as a reused key (422) rather than creating a second
// subscription under the id the first one holds; while the record lives,
// the same key with another body is 422 as ever.
func TestCreationKeyReusedAfterItsRecordExpiredIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	key := "expired-create-" + t.Name()
	body := subscriptionBody("tok_ok_expired", "month")
	status, created := b.postWithKey(t, "/v1/subscriptions", key, body)
	require.Equal(t, http.StatusCreated, status, "%v", created)
	other := subscriptionBody("tok_ok_expired", "week")
	status, _ = b.postWithKey(t, "/v1/subscriptions", key, other)
	require.Equal(t, http.StatusUnprocessableEntity, status)

	_, err := b.pool.Exec(context.Background(), `DELETE FROM idempotency_keys WHERE key = $1`, key)
	require.NoError(t, err)
	status, refused := b.postWithKey(t, "/v1/subscriptions", key, body)
	require.Equal(t, http.StatusUnprocessableEntity, status, "%v", refused)
	require.Contains(t, refused["detail"], "Idempotency-Key")
	list := b.call(t, http.MethodGet, "/v1/subscriptions?customer_id=cust-e2e", nil)["data"].([]any)
	require.Len(t, list, 1)
}

// The client's retry after the restore carries the card the customer
// changed to meanwhile: the recreated charge asks for its hold under the
// key the gateway answered, with another card. The gateway refuses the
// key (the simulator as Stripe: other parameters), and the node settles
// the charge from the key's operation, looked up by its key: the first
// hold, captured once, no review.
func TestRestoredChargeAskingWithAnotherCardIsTheKeysHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	key := "restore-card-" + t.Name()
	status, created := b.postWithKey(t, "/v1/subscriptions", key, subscriptionBody("tok_ok_restore", "month"))
	require.Equal(t, http.StatusCreated, status, "%v", created)
	subID := created["id"].(string)
	b.waitCharges(t, subID, 1, "succeeded")
	chargeKey := subID + ":" + b.clockNow(t).UTC().Format("2006-01-02")

	b.forgetSubscription(t, subID, key)
	status, again := b.postWithKey(t, "/v1/subscriptions", key, subscriptionBody("tok_ok_other", "month"))
	require.Equal(t, http.StatusCreated, status, "%v", again)
	require.Equal(t, subID, again["id"])
	b.waitCharges(t, subID, 1, "succeeded")
	require.Equal(t, []string{"a1:authorize:succeeded:tore", "a1:capture:succeeded:tore"}, b.gatewayOps(t, "sim1", chargeKey),
		"one hold, of the card the key held, captured once")
}
