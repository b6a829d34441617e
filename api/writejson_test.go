package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/testkit/dbtest"
)

// A value that fails to encode must not leave a 2xx status with an empty
// or truncated body behind: the status line would already be sent.
func TestWriteJSONEncodeFailureIs500(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{
		"year past 9999": map[string]any{"end": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"channel":        map[string]any{"ch": make(chan int)},
	} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeJSON(rec, http.StatusCreated, v)
			require.Equal(t, http.StatusInternalServerError, rec.Code)
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			var p Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
			require.Equal(t, problemInternal, p)
		})
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusCreated, map[string]int{"n": 1})
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, "{\"n\":1}\n", rec.Body.String())
}

// Behind the idempotency middleware, that 500 is not stored: the same key
// runs again instead of replaying an empty 201 for 24 hours.
func TestUnencodableResponseIsNotStored(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	runs := 0
	handler := idempotency.Middleware(idempotency.NewStore(pool, time.Minute),
		func(*http.Request) string { return "test" },
		idempotency.Problems{
			Write:          func(w http.ResponseWriter, status int, slug, title, detail string) { w.WriteHeader(status) },
			BodyTooLarge:   func(w http.ResponseWriter) { writeProblem(w, problemBodyTooLarge) },
			Unavailable:    func(w http.ResponseWriter) { writeProblem(w, problemUnavailable) },
			InternalFailed: func(w http.ResponseWriter) { writeProblem(w, problemInternal) },
		}, zerolog.Nop(),
	)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs++
		writeJSON(w, http.StatusCreated, map[string]any{"end": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	}))
	for i := 1; i <= 2; i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/things", bytes.NewBufferString(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		require.Equal(t, http.StatusInternalServerError, rec.Code, "request %d", i)
		require.Empty(t, rec.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, i, runs, "the retry executes again")
	}
	var stored int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&stored))
	require.Zero(t, stored)
}
