package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
)

// More concurrent requests than the node has connections only queue. Code
// inside a request's transaction reads the dev clock; when that read took
// a second connection from the same pool, every connection ended up held by
// a transaction waiting for another, and each read gave up after its 2 s
// timeout.
func TestMoreRequestsThanConnectionsDoNotStall(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	const requests = 4 * dbtest.PoolConns
	latencies := make([]time.Duration, requests)
	statuses := make([]int, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			start := time.Now()
			statuses[i] = post(b.url()+"/v1/subscriptions", fmt.Sprintf("%s-%d", t.Name(), i), subscriptionBody("tok_ok", "month"))
			latencies[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range requests {
		require.Equal(t, http.StatusCreated, statuses[i], "request %d", i)
		require.Less(t, latencies[i], 2*time.Second, "request %d waited for a connection held by another request", i)
	}
}

// post sends an admin POST from any goroutine and returns the status (0 if
// it could not be sent).
func post(url, idempotencyKey string, body any) int {
	data, err := json.Marshal(body)
	if err != nil {
		return 0
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Idempotency-Key", idempotencyKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
