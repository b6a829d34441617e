package charges_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// TestGatewayWaitsBackOff: a step whose gateway keeps answering that it did
// nothing waits longer each time (capped exponential backoff with full
// jitter, Pipeline.Retry), although a snooze spends no River attempt.
func TestGatewayWaitsBackOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.newCharge(ctx, t, fixture{})
	b.gateway.AuthorizeFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	w := newWorker(t, b, &charges.AuthorizeWorker{Pipeline: b.pipeline})

	const runs = 9 // fewer calls than open the default breaker
	res, err := w.Work(ctx, t, b.tx, charges.AuthorizeArgs{ChargeID: c.ID, Attempt: 1}, nil)
	var longest time.Duration
	for n := 1; ; n++ {
		require.NoError(t, err)
		ceiling := min(retryMax, retryBase<<(n-1))
		b.requireSnoozed(t, res, b.get(ctx, t, c.ID), 0, ceiling, true)
		longest = max(longest, res.Job.ScheduledAt.Sub(b.clock.Now()))
		if n == runs {
			break
		}
		res, err = w.WorkJob(ctx, t, b.tx, res.Job)
	}
	// Wait n is uniform up to retryBase * 2^(n-1): the chance that the eight
	// after the first all stay under retryBase is 2^-36.
	require.Greater(t, longest, retryBase, "the waits grow past the first one's ceiling")
	b.requireCalls(t, slices.Repeat([]string{"authorize K:a1:authorize " + currentCard}, runs)...)
	require.Equal(t, 1, b.get(ctx, t, c.ID).AttemptCount, "the same attempt and key throughout")
}
