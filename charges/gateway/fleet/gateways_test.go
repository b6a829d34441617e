package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// answering is a gateway that answers its authorizes with answers, in
// turn.
func answering(t *testing.T, answers []error) *gatewaytest.Gateway {
	g := gatewaytest.New(t, "sim1")
	g.AuthorizeFunc = func(context.Context, gateway.Request) (gateway.Result, error) {
		n := len(g.CallsOf(gateway.OpAuthorize)) // this call included
		return gateway.Result{Status: gateway.StatusSucceeded}, answers[n-1]
	}
	return g
}

func calls(ok, unavailable int) []error {
	out := make([]error, 0, ok+unavailable)
	for range unavailable {
		out = append(out, gateway.ErrUnavailable)
	}
	for range ok {
		out = append(out, nil)
	}
	return out
}

// The circuit opens on a failure rate with a minimum volume (the OpenAPI document: over
// 50 % of at least 10 calls in the window), not on a run of errors: a few
// bad cards among many good ones do not stop every customer's fleet.
func TestCircuitOpensOnFailureRateWithMinimumVolume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		answers     []error
		wantOpen    bool
		description string
	}{
		{"five failures in a row, then nothing", calls(0, 5), false, "too few calls to judge"},
		{"a few flaky cards among good ones", append(calls(15, 0), calls(0, 6)...), false, "6 of 21 failed"},
		{"half exactly", append(calls(5, 0), calls(0, 5)...), false, "not over 50 %"},
		{"most calls fail", append(calls(4, 0), calls(0, 6)...), true, "6 of 10 failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := answering(t, tc.answers)
			gws := fleet.New([]gateway.Gateway{g}, fleet.Breaker{
				Window: time.Minute, MinCalls: 10, FailureRatio: 0.5, OpenFor: time.Minute})
			wrapped, err := gws.Gateway("sim1")
			require.NoError(t, err)
			for range len(tc.answers) {
				_, err := wrapped.Authorize(context.Background(), gateway.Request{})
				require.False(t, errors.Is(err, fleet.ErrCircuitOpen), "open before the last call")
			}
			require.Equal(t, tc.wantOpen, gws.CircuitOpen("sim1"), tc.description)
			if tc.wantOpen {
				_, err := wrapped.Authorize(context.Background(), gateway.Request{})
				require.ErrorIs(t, err, fleet.ErrCircuitOpen)
				require.Len(t, g.CallsOf(gateway.OpAuthorize), len(tc.answers), "an open circuit sends nothing")
			}
		})
	}
}
