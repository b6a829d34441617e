package soak_test

// The processes under test: the real rebill binary, started and killed
// with testkit/proctest like e2e's process tests, and an HTTP
// client that drives them the way a careful integrator would (every POST
// under its own Idempotency-Key, retried with the same key until rebill
// gives a definite answer).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebill/rebill/testkit/proctest"
)

// TestMain removes the binary the soak built.
func TestMain(m *testing.M) { proctest.Main(m) }

// proc is one running `rebill serve`.
type proc = proctest.Process

// answer is one HTTP answer.
type answer struct {
	status int
	body   []byte
}

func (a answer) decode(v any) error { return json.Unmarshal(a.body, v) }

// problemType is the slug of a problem answer ("" for other bodies).
func (a answer) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// sendOnce sends one request to base.
func sendOnce(ctx context.Context, base, method, path, key, idemKey string, body any) (answer, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, reader)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: data}, err
}

// retryable reports whether an answer is not definite: rebill did
// nothing that stuck (5xx, the key's first request still running), so the
// same request with the same key may be sent again.
func retryable(a answer) bool {
	return a.status >= 500 || (a.status == http.StatusConflict && a.problemType() == "idempotency-key-in-use")
}

var requests atomic.Int64 // every HTTP request sent, retries included
