package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rebill/rebill/platform/tracing"
)

// collector is a fake OTLP/HTTP collector: it keeps the names of the spans
// posted to /v1/traces and the service they came from.
type collector struct {
	mu       sync.Mutex
	spans    []string
	services []string
	paths    []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, r.URL.Path)
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				c.services = append(c.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s.GetName())
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

// TestSetupExportsOverOTLPWhenAnEndpointIsSet: a span ended before shutdown
// reaches the collector at <endpoint>/v1/traces, from service rebill.
func TestSetupExportsOverOTLPWhenAnEndpointIsSet(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	shutdown, err := tracing.Setup(context.Background(), srv.URL+"/", "v-test")
	require.NoError(t, err)
	_, span := otel.Tracer("test").Start(context.Background(), "charge the card")
	require.True(t, span.IsRecording())
	span.End()
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the batch")

	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, []string{"charge the card"}, c.spans)
	require.Equal(t, []string{"/v1/traces"}, c.paths)
	require.Equal(t, []string{"rebill"}, c.services)
}

// TestSetupIsANoOpWithoutAnEndpoint: nothing records, nothing is sent.
func TestSetupIsANoOpWithoutAnEndpoint(t *testing.T) {
	shutdown, err := tracing.Setup(context.Background(), "", "v-test")
	require.NoError(t, err)
	_, span := otel.Tracer("test").Start(context.Background(), "charge the card")
	require.False(t, span.IsRecording())
	span.End()
	require.NoError(t, shutdown(context.Background()))
}
