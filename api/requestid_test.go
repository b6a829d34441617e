package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A client's X-Request-Id is used, logged and answered only when it is a
// short id of safe characters that is no card number; otherwise rebill
// makes one, answers it, and the header as sent reaches neither the log
// nor the handlers.
func TestRequestIDIsBoundedAndNeverLoggedRaw(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		sent []string
		kept bool
	}{
		{"a client's id", []string{"req_01JEXAMPLE.trace-7:3"}, true},
		{"a UUID", []string{"0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d"}, true},
		{"64 characters", []string{strings.Repeat("a", 64)}, true},
		{"a timestamp, no card", []string{"20261201093000123"}, true},
		{"none", nil, false},
		{"empty", []string{""}, false},
		{"65 characters", []string{strings.Repeat("a", 65)}, false},
		{"100,000 characters", []string{strings.Repeat("a", 100_000)}, false},
		{"a card number with spaces", []string{"4111 1111 1111 1111"}, false},
		{"a card number", []string{"4111111111111111"}, false},
		{"a card number with dashes", []string{"4111-1111-1111-1111"}, false},
		{"a card number with dots", []string{"4111.1111.1111.1111"}, false},
		{"a card number in an id", []string{"req_4111111111111111"}, false},
		{"a forged log line", []string{"x\n{\"level\":\"error\"}"}, false},
		{"a quote", []string{`x"y`}, false},
		{"non-ASCII", []string{"запрос-1"}, false},
		{"sent twice", []string{"first", "second"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
			for _, v := range c.sent {
				req.Header.Add(requestIDHeader, v)
			}
			rec := httptest.NewRecorder()
			NewServer(Deps{Logger: zerolog.New(&log)}).ServeHTTP(rec, req)

			answered := rec.Header().Get(requestIDHeader)
			require.Contains(t, log.String(), `"request_id":"`+answered+`"`, "the log names the id answered")
			if c.kept {
				require.Equal(t, c.sent[0], answered)
				return
			}
			_, err := uuid.Parse(answered)
			require.NoError(t, err, "an id rebill made: %q", answered)
			require.Less(t, log.Len(), 1024)
			for _, v := range c.sent {
				if v != "" {
					require.NotContains(t, log.String(), v)
				}
			}

			// Nor do the handlers see the header as sent.
			var seen http.Header
			var seenID string
			requestIDs(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				seen, seenID = r.Header.Clone(), requestID(r)
			})).ServeHTTP(httptest.NewRecorder(), req)
			require.Empty(t, seen.Values(requestIDHeader))
			_, err = uuid.Parse(seenID)
			require.NoError(t, err)
		})
	}
}

// Every answer of the API names its request id, also a 404.
func TestEveryResponseNamesItsRequestID(t *testing.T) {
	t.Parallel()
	s := NewServer(Deps{Logger: zerolog.Nop()})
	for _, path := range []string{"/healthz", "/nowhere", "/openapi.json"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		_, err := uuid.Parse(rec.Header().Get(requestIDHeader))
		require.NoError(t, err, path)
	}
}
