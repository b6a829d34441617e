package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/usecases"
)

// watchedCall is one call of a verb of subscription changes.
type watchedCall struct {
	verb   string
	caller usecases.Caller
	id     uuid.UUID
	update subscriptions.Update
}

// watchedBilling is the real use cases with the verbs of subscription
// changes answered by the test, so that what the handler hands them, in
// which order and in which transaction, is seen whatever the engine does.
// A verb the test leaves nil answers the subscription as a read by the
// same caller sees it (another customer's: 404).
type watchedBilling struct {
	*usecases.Service
	mu       sync.Mutex
	calls    []watchedCall
	update   func(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
	endTrial func(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error)
}

func (w *watchedBilling) record(c watchedCall) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, c)
}

func (w *watchedBilling) recorded() []watchedCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]watchedCall(nil), w.calls...)
}

func (w *watchedBilling) verbs() []string {
	var out []string
	for _, c := range w.recorded() {
		out = append(out, c.verb)
	}
	return out
}

func (w *watchedBilling) UpdateSubscription(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, u subscriptions.Update) (subscriptions.Subscription, error) {
	w.record(watchedCall{verb: "update", caller: caller, id: id, update: u})
	if w.update != nil {
		return w.update(ctx, tx, caller, id)
	}
	return w.Subscription(ctx, caller, id)
}

func (w *watchedBilling) RemovePendingUpdate(ctx context.Context, _ pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	w.record(watchedCall{verb: "remove", caller: caller, id: id})
	return w.Subscription(ctx, caller, id)
}

func (w *watchedBilling) EndTrial(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	w.record(watchedCall{verb: "end_trial", caller: caller, id: id})
	if w.endTrial != nil {
		return w.endTrial(ctx, tx, caller, id)
	}
	return w.Subscription(ctx, caller, id)
}

// setupWatched is setup with the verbs of subscription changes watched.
func setupWatched(t *testing.T) (testBundle, *watchedBilling) {
	t.Helper()
	w := &watchedBilling{}
	b := setup(t, setupOpts{lease: time.Minute, billing: func(uses *usecases.Service) api.Billing {
		w.Service = uses
		return w
	}})
	return b, w
}

// createFor creates a subscription of customer and returns its id.
func (b testBundle) createFor(t *testing.T, customer string) string {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "create-"+customer, createBodyFor(customer))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	return res.json(t)["id"].(string)
}

func firstErrorField(t *testing.T, res response) string {
	t.Helper()
	errs, ok := res.json(t)["errors"].([]any)
	require.True(t, ok, string(res.body))
	require.NotEmpty(t, errs, string(res.body))
	return errs[0].(map[string]any)["field"].(string)
}

// A body the handler can judge alone is refused before any use case runs,
// naming the field, and the refusal is not stored: the same key with a
// corrected body executes.
func TestUpdateBodyIsRefusedBeforeTheUseCase(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "cust-u1")
	path := "/v1/subscriptions/" + id + "/update"

	for name, tc := range map[string]struct{ body, field string }{
		"empty body":                       {``, ""},
		"empty object":                     {`{}`, ""},
		"only when, nothing to change":     {`{"effective":"period_end"}`, ""},
		"only nulls":                       {`{"amount":null,"description":null}`, ""},
		"effective outside its set":        {`{"amount":100,"effective":"tomorrow"}`, "effective"},
		"proration outside its set":        {`{"amount":100,"proration":"half"}`, "proration"},
		"proration of a period-end change": {`{"amount":100,"effective":"period_end","proration":"none"}`, "proration"},
		"trial_end other than now":         {`{"trial_end":"2027-01-01T00:00:00Z"}`, "trial_end"},
		"amount as a string":               {`{"amount":"100"}`, "amount"},
		"amount with a decimal point":      {`{"amount":49900.0}`, "amount"},
		"interval_count as a string":       {`{"interval_count":"2"}`, "interval_count"},
		"unknown field":                    {`{"amount":100,"plan":"gold"}`, "plan"},
		"metadata value not a string":      {`{"metadata":{"k":1}}`, "metadata.k"},
		"receipt of the wrong shape":       {`{"amount":100,"receipt":{"items":"one"}}`, "receipt.items"},
	} {
		res := b.do(t, http.MethodPost, path, adminKey, "bad", tc.body)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		require.Equal(t, tc.field, firstErrorField(t, res), name)
	}
	res := b.do(t, http.MethodPost, path, adminKey, "bad", `{"amount":1,"amount":2}`)
	require.Equal(t, http.StatusBadRequest, res.status, "a repeated key")
	res = b.do(t, http.MethodPost, path, adminKey, "bad", `{"description":"4242 4242 4242 4242"}`)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, "https://rebill.dev/problems/card-number-refused", res.json(t)["type"])
	res = b.do(t, http.MethodPost, path, adminKey, "", `{"amount":100}`)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, "https://rebill.dev/problems/idempotency-key-missing", res.json(t)["type"])
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+uuid.NewString()+"/update", adminKey, "unknown", `{"amount":100}`)
	require.Equal(t, http.StatusNotFound, res.status)
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pending_update/remove", adminKey, "bad-remove", `{"now":true}`)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, "now", firstErrorField(t, res))
	require.Equal(t, []string{"update"}, w.verbs(), "only the request for an unknown id reached the use case")

	res = b.do(t, http.MethodPost, path, adminKey, "bad", `{"amount":100}`)
	require.Equal(t, http.StatusOK, res.status, "the refusals were not stored under the key: %s", res.body)
	require.Equal(t, []string{"update", "update"}, w.verbs())
}

// The handler hands the use case exactly what was sent: nil for every
// term left out, effective now by default, proration as sent (the use
// case decides what a customer key may send), and the caller as
// authenticated.
func TestUpdateHandsTheUseCaseWhatWasSent(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "cust-u2")
	path := "/v1/subscriptions/" + id + "/update"
	support := b.newKey(t, "support", "")
	customer := b.newKey(t, "customer", "cust-u2")

	res := b.do(t, http.MethodPost, path, support, "full", `{"amount":2000,"currency":"USD","interval":"month","interval_count":2,
		"description":"Gold","metadata":{"plan":"gold"},"effective":"now","proration":"charge_now",
		"receipt":{"customer":{"email":"a@example.com"},"items":[{"description":"Gold","quantity":"1","amount":2000,"vat_code":1}]}}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = b.do(t, http.MethodPost, path, customer, "later", `{"amount":500,"effective":"period_end"}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = b.do(t, http.MethodPost, path, customer, "cust-prorates", `{"amount":500,"proration":"credit_next","metadata":{}}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))

	calls := w.recorded()
	require.Len(t, calls, 3)
	full := calls[0].update
	month := period.Interval("month")
	require.Equal(t, int64(2000), *full.Amount)
	require.Equal(t, "USD", full.Currency)
	require.Equal(t, &month, full.Interval)
	require.Equal(t, 2, *full.IntervalCount)
	require.Equal(t, "Gold", *full.Description)
	require.Equal(t, map[string]string{"plan": "gold"}, full.Metadata)
	require.Equal(t, int64(2000), full.Receipt.Items[0].Amount)
	require.Equal(t, subscriptions.EffectiveNow, full.Effective)
	require.Equal(t, subscriptions.ProrationChargeNow, full.Proration)
	require.Equal(t, "support", calls[0].caller.Actor.Role)
	require.Empty(t, calls[0].caller.CustomerID, "staff see every customer")
	require.Equal(t, id, calls[0].id.String())

	amount := int64(500)
	require.NotEqual(t, uuid.Nil, calls[1].update.ChangeID, "the change id is derived from the request's key")
	require.NotEqual(t, calls[0].update.ChangeID, calls[1].update.ChangeID)
	calls[1].update.ChangeID = uuid.Nil
	require.Equal(t, subscriptions.Update{Amount: &amount, Effective: subscriptions.EffectivePeriodEnd}, calls[1].update,
		"what was left out stays nil, and no proration is chosen for the customer")
	require.Equal(t, "cust-u2", calls[1].caller.CustomerID)
	require.Equal(t, subscriptions.ProrationCreditNext, calls[2].update.Proration,
		"a customer's proration reaches the use case, which refuses a value other than the configured default")
	require.Equal(t, subscriptions.EffectiveNow, calls[2].update.Effective)
	require.NotNil(t, calls[2].update.Metadata, "an empty metadata object clears the metadata, it does not leave it unchanged")
	require.Empty(t, calls[2].update.Metadata)
}

// trial_end "now" ends the trial before the change, in the request's
// transaction, and a change refused after it undoes the end of the trial:
// the refusal is a 409, stored and replayed, and must not stand beside a
// trial that ended.
func TestTrialEndNowComesFirstAndFallsWithTheChange(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "cust-u3")
	path := "/v1/subscriptions/" + id + "/update"

	res := b.do(t, http.MethodPost, path, adminKey, "trial-only", `{"trial_end":"now"}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, []string{"end_trial"}, w.verbs(), "only the trial ends")
	res = b.do(t, http.MethodPost, path, adminKey, "trial-and-amount", `{"trial_end":"now","amount":700,"proration":"none"}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, []string{"end_trial", "end_trial", "update"}, w.verbs())
	require.Equal(t, subscriptions.ProrationNone, w.recorded()[2].update.Proration)

	// The first step writes for real (a cancel stands in for the end of
	// the trial), the second is refused.
	w.endTrial = func(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error) {
		return w.Cancel(ctx, tx, caller, id, false)
	}
	refused := fault.New(fault.Conflict, "a change that races another")
	w.update = func(context.Context, pgx.Tx, usecases.Caller, uuid.UUID) (subscriptions.Subscription, error) {
		return subscriptions.Subscription{}, refused
	}
	res = b.do(t, http.MethodPost, path, adminKey, "refused", `{"trial_end":"now","amount":700}`)
	require.Equal(t, http.StatusConflict, res.status, string(res.body))
	require.Equal(t, "https://rebill.dev/problems/invalid-transition", res.json(t)["type"])
	got := b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)
	require.Equal(t, "active", got["status"], "the first step was undone with the refused second")
	replay := b.do(t, http.MethodPost, path, adminKey, "refused", `{"trial_end":"now","amount":700}`)
	require.Equal(t, http.StatusConflict, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(res.body), string(replay.body))
	require.Equal(t, "active", b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)["status"])

	// Both steps succeed: both stand.
	w.update = func(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error) {
		return w.Cancel(ctx, tx, caller, id, false) // cancelled already: returned unchanged
	}
	res = b.do(t, http.MethodPost, path, adminKey, "both", `{"trial_end":"now","amount":700}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "cancelled", res.json(t)["status"])
	require.Equal(t, "cancelled", b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)["status"])
}

// A change is executed once per Idempotency-Key: a retry gets the first
// answer byte for byte without reaching the use case again, and the key
// reused for another change is 422.
func TestUpdateAndRemovalAreReplayedUnderTheirKeys(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "cust-u4")
	customer := b.newKey(t, "customer", "cust-u4")
	for _, tc := range []struct{ path, body, key string }{
		{"/v1/subscriptions/" + id + "/update", `{"amount":1500,"effective":"period_end"}`, "change"},
		{"/v1/subscriptions/" + id + "/pending_update/remove", ``, "removal"},
	} {
		before := len(w.recorded())
		first := b.do(t, http.MethodPost, tc.path, customer, tc.key, tc.body)
		require.Equal(t, http.StatusOK, first.status, string(first.body))
		require.Empty(t, first.header.Get("Idempotent-Replayed"))
		again := b.do(t, http.MethodPost, tc.path, customer, tc.key, tc.body)
		require.Equal(t, http.StatusOK, again.status)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, string(first.body), string(again.body))
		require.Len(t, w.recorded(), before+1, "the retry did not execute again")
	}
	res := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/update", customer, "change", `{"amount":1600,"effective":"period_end"}`)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "the key was used for another body")
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pending_update/remove", customer, "change", ``)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "the key was used for another path")
	require.Equal(t, []string{"update", "remove"}, w.verbs())
}

// Another customer's subscription is not found, whatever the verb, as
// the read of the same caller finds it; staff reach every one.
func TestUpdateVerbsFollowTheReadRules(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "alice")
	bob := b.newKey(t, "customer", "bob")
	support := b.newKey(t, "support", "")
	for _, tc := range []struct{ path, body string }{
		{"/update", `{"amount":1}`},
		{"/pending_update/remove", ``},
	} {
		res := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+tc.path, bob, "bob"+tc.path, tc.body)
		require.Equal(t, http.StatusNotFound, res.status, tc.path)
		res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+tc.path, support, "support"+tc.path, tc.body)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", tc.path, res.body)
	}
	calls := w.recorded()
	require.Len(t, calls, 4)
	require.Equal(t, "bob", calls[0].caller.CustomerID, "bob's key reached the use case as bob")
}

// The subscription shows its pending update, the terms it leaves as they
// are as null, and its credit balance; a subscription without them shows
// null and 0.
func TestSubscriptionShowsPendingUpdateAndCredit(t *testing.T) {
	t.Parallel()
	b, w := setupWatched(t)
	id := b.createFor(t, "cust-u5")
	got := b.do(t, http.MethodGet, "/v1/subscriptions/"+id, adminKey, "", "").json(t)
	require.Contains(t, got, "pending_update")
	require.Nil(t, got["pending_update"])
	require.Equal(t, float64(0), got["credit_balance"])

	changeID := uuid.New()
	effective := time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC)
	amount, count := int64(800), 2
	w.update = func(ctx context.Context, _ pgx.Tx, caller usecases.Caller, id uuid.UUID) (subscriptions.Subscription, error) {
		sub, err := w.Subscription(ctx, caller, id)
		sub.PendingUpdate = &subscriptions.PendingUpdate{ID: changeID, Amount: &amount, IntervalCount: &count,
			EffectiveAt: effective, CreatedAt: effective.Add(-time.Hour)}
		sub.CreditBalance = 250
		return sub, err
	}
	res := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/update", adminKey, "show", `{"amount":800,"interval_count":2,"effective":"period_end"}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	got = res.json(t)
	require.Equal(t, float64(250), got["credit_balance"])
	require.Equal(t, map[string]any{
		"id": changeID.String(), "amount": float64(800), "interval": nil, "interval_count": float64(2),
		"description": nil, "metadata": nil, "receipt": nil,
		"effective_at": "2026-12-08T09:00:00Z", "created_at": "2026-12-08T08:00:00Z",
	}, got["pending_update"])
}
