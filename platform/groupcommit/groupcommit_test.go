package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/groupcommit"
)

type req struct {
	n   int
	out int
}

// Concurrent requests share batches, each is sent exactly once and gets
// its own result, and no batch is larger than the limit.
func TestConcurrentRequestsShareBatches(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	b := &groupcommit.Batcher[*req]{Limit: 16, Send: func(_ context.Context, batch []*req) error {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // a statement takes time: requests arriving meanwhile queue up
		for _, r := range batch {
			r.out = r.n * 2
		}
		return nil
	}}
	const n = 200
	reqs := make([]*req, n)
	var wg sync.WaitGroup
	for i := range reqs {
		reqs[i] = &req{n: i}
		wg.Go(func() { require.NoError(t, b.Do(t.Context(), reqs[i])) })
	}
	wg.Wait()
	total := 0
	for _, s := range sizes {
		require.LessOrEqual(t, s, 16)
		total += s
	}
	require.Equal(t, n, total, "every request was sent once")
	require.Less(t, len(sizes), n/2, "requests shared batches: %v", sizes)
	for i, r := range reqs {
		require.Equal(t, 2*i, r.out)
	}
}

// A batch's error, or its panic, reaches every request in it, and the
// batcher goes on serving the next ones.
func TestBatchFailureReachesEveryRequest(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	boom := errors.New("boom")
	b := &groupcommit.Batcher[*req]{Send: func(_ context.Context, batch []*req) error {
		switch calls.Add(1) {
		case 1:
			return boom
		case 2:
			panic("bad batch")
		}
		return nil
	}}
	require.ErrorIs(t, b.Do(t.Context(), &req{}), boom)
	require.ErrorContains(t, b.Do(t.Context(), &req{}), "bad batch")
	require.NoError(t, b.Do(t.Context(), &req{}))
}

// A batch outlives the context of the run that sends it: the other
// requests in it must not fail because that run ended.
func TestBatchIgnoresTheSendersCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	b := &groupcommit.Batcher[*req]{Timeout: time.Second, Send: func(ctx context.Context, _ []*req) error {
		cancel()
		return ctx.Err()
	}}
	require.NoError(t, b.Do(ctx, &req{}))
}
