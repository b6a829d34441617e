package sim_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/dbtest"
)

func TestStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()

	root, stop, err := sim.Start(ctx, pool, []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	c := sim.NewClient("sim1", root+"/sim1", sim.ClientOptions{Timeout: 10 * time.Second})
	res, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 100))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, res.Status)

	// A lost answer must not hold the shutdown for its full minute.
	lost := make(chan error, 1)
	go func() {
		_, err := c.Authorize(ctx, authorizeReq("k2", tokLost, 100))
		lost <- err
	}()
	store := sim.NewStore(pool)
	require.Eventually(t, func() bool {
		entries, err := store.Ledger(ctx, "sim1")
		return err == nil && len(entries) == 2
	}, 5*time.Second, 10*time.Millisecond)

	stopCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	require.NoError(t, stop(stopCtx))
	requireErr(t, <-lost, gateway.ErrUnknownOutcome)

	// The ledger outlives the server.
	root, stop, err = sim.Start(ctx, pool, []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	again, err := sim.NewClient("sim1", root+"/sim1", sim.ClientOptions{}).Lookup(ctx, lookupOf("k1"))
	require.NoError(t, err)
	require.Equal(t, res, again)
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.ListenAndServe(ctx, addr, pool, clock.Wall{}, []string{"sim1"}, zerolog.Nop()) }()

	c := sim.NewClient("sim1", "http://"+addr+"/sim1", sim.ClientOptions{})
	require.Eventually(t, func() bool {
		_, err := c.Authorize(context.Background(), authorizeReq("k1", tokOK, 100))
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not return after its context ended")
	}
}
