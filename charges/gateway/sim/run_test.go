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
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/dbtest"
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

// fixedClock is a service clock standing at one moment, as the dev clock
// does until it is moved.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// A sim started on a clock stamps its operations with it, not with real
// time: look-ups report that time, the day listing of the clock's day
// holds them and the real day's does not, and the ledger keeps the real
// time apart. A replay keeps the first stamp even after the clock moved.
func TestStartOnClockStampsOperationsWithTheClock(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	devNow := time.Date(2031, 5, 17, 23, 30, 0, 0, time.UTC)
	before := time.Now()

	root, stop, err := sim.StartOnClock(ctx, pool, fixedClock(devNow), []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	c := sim.NewClient("sim1", root+"/sim1", sim.ClientOptions{Timeout: 10 * time.Second})
	auth, err := c.Authorize(ctx, authorizeReq("k1", tokOK, 100))
	require.NoError(t, err)
	capture, err := c.Capture(ctx, settleReq("k1c", auth))
	require.NoError(t, err)
	require.Equal(t, gateway.StatusSucceeded, capture.Status)
	require.True(t, auth.At.Equal(devNow), "authorize at %s", auth.At)
	require.True(t, capture.At.Equal(devNow), "capture at %s", capture.At)

	found, err := c.Lookup(ctx, gateway.ByKey(gateway.OpCapture, "k1c"))
	require.NoError(t, err)
	require.True(t, found.At.Equal(devNow), "looked up at %s", found.At)
	onDevDay, err := c.Operations(ctx, devNow)
	require.NoError(t, err)
	require.Len(t, onDevDay, 2)
	onRealDay, err := c.Operations(ctx, before)
	require.NoError(t, err)
	require.Empty(t, onRealDay)

	entries, err := sim.NewStore(pool).Ledger(ctx, "sim1")
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, e := range entries {
		require.True(t, e.At.Equal(devNow))
		require.False(t, e.ReceivedAt.Before(before.Add(-time.Second)), "received_at %s is real time", e.ReceivedAt)
		require.True(t, e.ReceivedAt.Before(devNow))
	}

	// The same books served on a later clock: a replay answers the first
	// stamp and records nothing.
	require.NoError(t, stop(ctx))
	root, stop, err = sim.StartOnClock(ctx, pool, fixedClock(devNow.Add(48*time.Hour)), []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	c = sim.NewClient("sim1", root+"/sim1", sim.ClientOptions{Timeout: 10 * time.Second})
	again, err := c.Capture(ctx, settleReq("k1c", auth))
	require.NoError(t, err)
	require.True(t, again.At.Equal(devNow), "replayed at %s", again.At)
	entries, err = sim.NewStore(pool).Ledger(ctx, "sim1")
	require.NoError(t, err)
	require.Len(t, entries, 2)
}
