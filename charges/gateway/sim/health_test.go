package sim_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	opts := sim.ClientOptions{Timeout: 2 * time.Second}

	require.NoError(t, b.client("sim1", opts).Health(ctx))

	t.Run("down answers 503", func(t *testing.T) {
		b.setFaults(t, "sim2", sim.FaultsPatch{Down: ptr(true)})
		err := b.client("sim2", opts).Health(ctx)
		require.ErrorIs(t, err, gateway.ErrUnavailable)
		require.ErrorContains(t, err, "gateway sim2")
	})

	t.Run("latency and error rate do not apply", func(t *testing.T) {
		b.setFaults(t, "sim1", sim.FaultsPatch{LatencyMS: ptr(5000), ErrorRate: ptr(1.0)})
		require.NoError(t, b.client("sim1", opts).Health(ctx))
	})

	t.Run("a gateway not hosted answers 404", func(t *testing.T) {
		err := sim.NewClient("acme", b.root+"/sim9", opts).Health(ctx)
		require.Error(t, err)
		require.False(t, errors.Is(err, gateway.ErrUnavailable), "a wrong URL is not an outage: %v", err)
		require.ErrorContains(t, err, "gateway acme")
		require.ErrorContains(t, err, "404")
		require.ErrorContains(t, err, "/sim9/health")
	})

	t.Run("the root without a gateway answers 404", func(t *testing.T) {
		err := sim.NewClient("sim1", b.root, opts).Health(ctx)
		require.ErrorContains(t, err, "404")
	})

	t.Run("nothing listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		err = sim.NewClient("sim1", "http://user:secret@"+addr+"/sim1", opts).Health(ctx)
		require.ErrorContains(t, err, "gateway sim1: no answer from")
		require.NotContains(t, err.Error(), "secret", "credentials in a URL are redacted")
		require.False(t, errors.Is(err, gateway.ErrUnavailable))
	})
}
