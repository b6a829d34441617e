package gatewaytest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/testkit/gatewaytest"
)

// failures is a testing.TB that keeps what Errorf reports.
type failures struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestAnswersThroughItsFuncsAndRecordsEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := gatewaytest.New(t, "sim1")
	held := gateway.Result{Status: gateway.StatusSucceeded, Reference: "auth_1"}
	g.AuthorizeFunc = gatewaytest.Answer(held, nil)
	g.CaptureFunc = gatewaytest.Answer(gateway.Result{}, gateway.ErrUnavailable)
	g.LookupFunc = gatewaytest.Found(map[string]gateway.Result{"k:a1:authorize": held})

	res, err := g.Authorize(ctx, gateway.Request{IdempotencyKey: "k:a1:authorize", Token: "tok_1", Amount: 500})
	require.NoError(t, err)
	require.Equal(t, held, res)
	_, err = g.Capture(ctx, gateway.Request{IdempotencyKey: "k:a1:capture", AuthorizationID: "auth_1"})
	require.ErrorIs(t, err, gateway.ErrUnavailable)
	res, err = g.Lookup(ctx, gateway.LookupRequest{Op: gateway.OpAuthorize, MayReplay: true,
		Request: gateway.Request{IdempotencyKey: "k:a1:authorize"}})
	require.NoError(t, err)
	require.Equal(t, held, res)
	_, err = g.Lookup(ctx, gateway.ByKey(gateway.OpCapture, "k:a1:capture"))
	require.ErrorIs(t, err, gateway.ErrNotFound)

	calls := g.Calls()
	require.Len(t, calls, 4)
	require.Equal(t, gateway.OpAuthorize, calls[0].Op)
	require.Equal(t, "tok_1", calls[0].Request.Token)
	require.EqualValues(t, 500, calls[0].Request.Amount)
	require.Equal(t, "auth_1", calls[1].Request.AuthorizationID)
	require.True(t, calls[2].Lookup.MayReplay)
	require.Equal(t, []string{"k:a1:authorize", "k:a1:capture"}, g.Keys(gatewaytest.OpLookup))
	require.Len(t, g.CallsOf(gateway.OpCapture), 1)

	g.Reset()
	require.Empty(t, g.Calls())
}

// A call the test did not program fails the test and answers an error:
// a fake never succeeds by accident.
func TestUnexpectedCallFailsTheTest(t *testing.T) {
	t.Parallel()
	tb := &failures{TB: t}
	g := gatewaytest.New(tb, "sim1")
	_, err := g.Void(context.Background(), gateway.Request{IdempotencyKey: "k:a1:void"})
	require.ErrorIs(t, err, gatewaytest.ErrUnexpectedCall)
	_, err = g.Operations(context.Background(), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, gatewaytest.ErrUnexpectedCall)
	require.Len(t, tb.msgs, 2)
	require.Contains(t, tb.msgs[0], "unexpected void k:a1:void")
	require.Len(t, g.Calls(), 2, "unexpected calls are recorded too")
}

// Calls from many goroutines are all recorded (run with -race).
func TestRecordsConcurrentCalls(t *testing.T) {
	t.Parallel()
	g := gatewaytest.New(t, "sim1")
	g.AuthorizeFunc = gatewaytest.Answer(gateway.Result{Status: gateway.StatusSucceeded}, nil)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, _ = g.Authorize(context.Background(), gateway.Request{IdempotencyKey: fmt.Sprintf("k%d", i)})
			_ = g.Calls()
		})
	}
	wg.Wait()
	require.Len(t, g.Keys(gateway.OpAuthorize), 50)
}
