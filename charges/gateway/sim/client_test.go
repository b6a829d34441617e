package sim_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
)

// The client's error mapping against servers that misbehave in ways the sim
// itself does not: proxies, crashes, half answers.
func TestClientErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
	}{
		{"503", status(http.StatusServiceUnavailable), gateway.ErrUnavailable},
		{"502 from a proxy", status(http.StatusBadGateway), gateway.ErrUnknownOutcome},
		{"504 from a proxy", status(http.StatusGatewayTimeout), gateway.ErrUnknownOutcome},
		{"500", status(http.StatusInternalServerError), gateway.ErrUnknownOutcome},
		{"connection dropped after the request", func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		}, gateway.ErrUnknownOutcome},
		{"answer cut short", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "200")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"op":"authorize","sta`))
		}, gateway.ErrUnknownOutcome},
		{"no answer in time", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // lets net/http see the caller leave
			<-r.Context().Done()
		}, gateway.ErrUnknownOutcome},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(tt.handler)
			t.Cleanup(ts.Close)
			c := sim.NewClient("sim1", ts.URL+"/sim1", sim.ClientOptions{Timeout: 200 * time.Millisecond})

			_, err := c.Authorize(context.Background(), authorizeReq("k1", tokOK, 100))
			requireErr(t, err, tt.want)
		})
	}
}

func TestClientConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	c := sim.NewClient("sim1", "http://"+addr+"/sim1", sim.ClientOptions{})
	for _, token := range allTokens {
		_, err = c.Authorize(context.Background(), authorizeReq("k1", token, 100))
		requireErr(t, err, gateway.ErrUnavailable)
	}
	_, err = c.Lookup(context.Background(), lookupOf("k1"))
	requireErr(t, err, gateway.ErrUnavailable)
}

func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }
}
