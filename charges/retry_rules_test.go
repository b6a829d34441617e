package charges

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

func TestSameCardRetriesFollowCardNetworkRules(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	attempts := func(n int, ago time.Duration) []time.Time {
		out := make([]time.Time, n)
		for i := range out {
			out[i] = now.Add(-ago)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		charge  Charge
		token   string
		refused bool
	}{
		{"fourteen recent attempts", Charge{token: "tok", AttemptTimes: attempts(14, time.Hour)}, "tok", false},
		{"fifteen recent attempts", Charge{token: "tok", AttemptTimes: attempts(15, time.Hour)}, "tok", true},
		{"fifteen attempts, older than 30 days", Charge{token: "tok", AttemptTimes: attempts(15, 31*24*time.Hour)}, "tok", false},
		{"fifteen recent attempts, another card", Charge{token: "tok", AttemptTimes: attempts(15, time.Hour)}, "tok_new", false},
		{"stolen card", Charge{token: "tok", FailureCode: "stolen_card", AttemptTimes: attempts(1, time.Hour)}, "tok", true},
		{"lost card", Charge{token: "tok", FailureCode: "lost_card"}, "tok", true},
		{"stolen card, another card", Charge{token: "tok", FailureCode: "stolen_card"}, "tok_new", false},
		{"insufficient funds", Charge{token: "tok", FailureCode: "insufficient_funds"}, "tok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.charge.sameCardRetryAllowed(tc.token, now)
			require.Equal(t, tc.refused, errors.Is(err, ErrRetryRefused), "%v", err)
		})
	}
}

// replayed reports whether some look-up g got allowed a replay.
func replayed(g *gatewaytest.Gateway) bool {
	for _, c := range g.CallsOf(gatewaytest.OpLookup) {
		if c.Lookup.MayReplay {
			return true
		}
	}
	return false
}

func TestLiveMoneyRefusesARetryThatWouldPayTwice(t *testing.T) {
	t.Parallel()
	c := Charge{Gateway: "fake", PeriodKey: "2026-12-01", AttemptCount: 2}
	ok := gateway.Result{Status: gateway.StatusSucceeded, Reference: "op_1"}
	declined := gateway.Result{Status: gateway.StatusDeclined}
	for _, tc := range []struct {
		name  string
		ops   map[gateway.Op]gateway.Result
		found string
	}{
		{"nothing at the gateway", nil, ""},
		{"declined authorization", map[gateway.Op]gateway.Result{"authorize": declined}, ""},
		{"live hold", map[gateway.Op]gateway.Result{"authorize": ok}, "a live hold op_1 of attempt 2"},
		{"voided hold", map[gateway.Op]gateway.Result{"authorize": ok, "void": ok}, ""},
		{"captured", map[gateway.Op]gateway.Result{"authorize": ok, "capture": ok}, "a succeeded capture op_1 of attempt 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ops := map[string]gateway.Result{}
			for phase, res := range tc.ops {
				ops[c.GatewayKey(phase)] = res
			}
			g := gatewaytest.New(t, "fake")
			g.LookupFunc = gatewaytest.Found(ops)
			p := &Pipeline{Gateways: fleet.New([]gateway.Gateway{g}, fleet.DefaultBreaker), CallTimeout: time.Second, Logger: zerolog.Nop()}
			found, err := p.LiveMoney(context.Background(), c)
			require.NoError(t, err)
			require.Equal(t, tc.found, found)
			require.False(t, replayed(g), "a look must not send an authorize again: it could place the hold it looks for")
		})
	}
	t.Run("provider cannot tell", func(t *testing.T) {
		t.Parallel()
		g := gatewaytest.New(t, "fake")
		g.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnprovable)
		p := &Pipeline{Gateways: fleet.New([]gateway.Gateway{g}, fleet.DefaultBreaker), CallTimeout: time.Second, Logger: zerolog.Nop()}
		_, err := p.LiveMoney(context.Background(), c)
		require.ErrorIs(t, err, ErrGatewayUnreachable, "no retry on a guess")
	})
	t.Run("gateway unreachable", func(t *testing.T) {
		t.Parallel()
		g := gatewaytest.New(t, "fake")
		g.LookupFunc = gatewaytest.LookupAnswer(gateway.Result{}, gateway.ErrUnavailable)
		p := &Pipeline{Gateways: fleet.New([]gateway.Gateway{g}, fleet.DefaultBreaker), CallTimeout: time.Second, Logger: zerolog.Nop()}
		_, err := p.LiveMoney(context.Background(), c)
		require.ErrorIs(t, err, ErrGatewayUnreachable)
	})
}
