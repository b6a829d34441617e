package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
	"github.com/rebill/rebill/experiments"
)

// stub is a gateway that answers every authorize with err.
func stub(t *testing.T, name string, err error) *gatewaytest.Gateway {
	g := gatewaytest.New(t, name)
	g.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded}, err)
	return g
}

func gatewaysForRouting(t *testing.T) *fleet.Gateways {
	t.Helper()
	gws := fleet.Configure([]fleet.Configured{
		{Gateway: stub(t, "cheap", nil), Settings: fleet.Settings{Kind: "sim", Priority: 3,
			CommissionBPS: map[string]int64{"RUB": 150}, Currencies: []string{"RUB"}, HoldLifetime: 168 * time.Hour}},
		{Gateway: stub(t, "broken", gateway.ErrUnknownOutcome), Settings: fleet.Settings{Kind: "sim",
			Priority: 1, CommissionBPS: map[string]int64{"*": 100}}},
		{Gateway: stub(t, "dear", nil), Settings: fleet.Settings{Kind: "sim", Priority: 2,
			CommissionBPS: map[string]int64{"RUB": 250, "*": 300}, Currencies: []string{"RUB", "USD"}}},
	}, fleet.Breaker{Window: time.Minute, MinCalls: 1000, FailureRatio: 0.5, OpenFor: time.Minute})
	for _, name := range []string{"broken", "cheap"} {
		g, err := gws.Gateway(name)
		require.NoError(t, err)
		for range 12 {
			_, _ = g.Authorize(context.Background(), gateway.Request{})
		}
	}
	return gws
}

func TestGatewaysListShowsTermsAndLiveHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{lease: time.Minute, gateways: gatewaysForRouting(t)})
	support := b.newKey(t, "support", "")
	customer := b.newKey(t, "customer", "cust-1")

	require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/v1/gateways", customer, "", "").status)
	res := b.do(t, "GET", "/v1/gateways", support, "", "")
	require.Equal(t, http.StatusOK, res.status)
	var body struct {
		Data []struct {
			Name          string           `json:"name"`
			Priority      int              `json:"priority"`
			CommissionBPS map[string]int64 `json:"commission_bps"`
			HoldLifetime  *string          `json:"hold_lifetime"`
			Health        struct {
				Circuit     string  `json:"circuit"`
				Calls       int     `json:"calls"`
				ErrorRate   float64 `json:"error_rate"`
				TimeoutRate float64 `json:"timeout_rate"`
				Window      string  `json:"window"`
			} `json:"health"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(res.body, &body))
	require.Len(t, body.Data, 3)
	require.Equal(t, "cheap", body.Data[0].Name, "configuration order")
	require.Equal(t, "168h", *body.Data[0].HoldLifetime)
	require.Equal(t, 12, body.Data[0].Health.Calls)
	require.Zero(t, body.Data[0].Health.ErrorRate)
	broken := body.Data[1].Health
	require.Equal(t, "closed", broken.Circuit, "the breaker's own threshold is not reached")
	require.Equal(t, 12, broken.Calls)
	require.Equal(t, 1.0, broken.ErrorRate)
	require.Equal(t, 1.0, broken.TimeoutRate)
	require.Equal(t, "5m", broken.Window)
	require.Nil(t, body.Data[2].HoldLifetime)
	require.Zero(t, body.Data[2].Health.Calls)
}

func TestRoutingBindingPicksTheCheapestHealthyGateway(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{lease: time.Minute, gateways: gatewaysForRouting(t)})
	customer := b.newKey(t, "customer", "cust-1")

	res := b.do(t, "GET", "/v1/routing/binding?currency=RUB&amount=49900", customer, "", "")
	require.Equal(t, http.StatusOK, res.status)
	require.JSONEq(t, `{"gateway": "cheap", "reason": "cheapest", "experiment": null, "candidates": [
		{"name": "cheap", "eligible": true, "cost": 749, "reason": "selected"},
		{"name": "dear", "eligible": true, "cost": 1248, "reason": "higher_cost"},
		{"name": "broken", "eligible": false, "cost": 499, "reason": "error_rate_too_high"}]}`, string(res.body))

	res = b.do(t, "GET", "/v1/routing/binding?currency=EUR&amount=100", customer, "", "")
	require.Equal(t, http.StatusOK, res.status)
	require.JSONEq(t, `{"gateway": null, "reason": "no_eligible_gateway", "experiment": null, "candidates": [
		{"name": "broken", "eligible": false, "cost": 1, "reason": "error_rate_too_high"},
		{"name": "dear", "eligible": false, "cost": null, "reason": "currency_not_supported"},
		{"name": "cheap", "eligible": false, "cost": null, "reason": "currency_not_supported"}]}`, string(res.body))

	for _, q := range []string{"currency=rub&amount=1", "currency=RUB&amount=0", "currency=RUB&amount=1.5", "currency=RUB",
		"amount=5", "currency=RUB&amount=1000000000000"} {
		res := b.do(t, "GET", "/v1/routing/binding?"+q, customer, "", "")
		require.Equal(t, http.StatusBadRequest, res.status, q)
	}
}

// A customer in a routing experiment's arm binds by its rule: here a fixed
// list puts the dearer gateway first, and the answer names the arm. The
// ineligible stay ineligible whatever the list says; a customer key may
// not ask for another customer's arm.
func TestRoutingBindingFollowsTheCustomersArm(t *testing.T) {
	t.Parallel()
	set, err := experiments.Parse([]byte(`
- key: route-list
  policy: routing
  start: 2020-01-01T00:00:00Z
  arms:
    - {name: control, weight: 0}
    - {name: listed, weight: 1, rule: priority, priority: [broken, dear, cheap]}
`), experiments.Limits{DunningMax: 720 * time.Hour, MaxAttempts: 15, Gateways: []string{"cheap", "broken", "dear"}})
	require.NoError(t, err)
	b := setup(t, setupOpts{lease: time.Minute, gateways: gatewaysForRouting(t), experiments: set})
	customer := b.newKey(t, "customer", "cust-1")
	support := b.newKey(t, "support", "")

	for _, key := range []string{customer, support} {
		res := b.do(t, "GET", "/v1/routing/binding?currency=RUB&amount=49900&customer_id=cust-1", key, "", "")
		require.Equal(t, http.StatusOK, res.status)
		require.JSONEq(t, `{"gateway": "dear", "reason": "fixed_priority", "experiment": {"key": "route-list", "arm": "listed"},
			"candidates": [
			{"name": "dear", "eligible": true, "cost": 1248, "reason": "selected"},
			{"name": "cheap", "eligible": true, "cost": 749, "reason": "not_preferred"},
			{"name": "broken", "eligible": false, "cost": 499, "reason": "error_rate_too_high"}]}`, string(res.body))
	}
	res := b.do(t, "GET", "/v1/routing/binding?currency=RUB&amount=49900", customer, "", "")
	require.Equal(t, http.StatusOK, res.status)
	require.Contains(t, string(res.body), `"reason":"cheapest"`, "without a customer no arm governs")
	require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/v1/routing/binding?currency=RUB&amount=1&customer_id=cust-2", customer, "", "").status)
	require.Equal(t, http.StatusBadRequest, b.do(t, "GET", "/v1/routing/binding?currency=RUB&amount=1&customer_id=", support, "", "").status)
}
