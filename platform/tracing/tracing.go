// Package tracing sets up OpenTelemetry for `rebill serve`: spans of HTTP
// requests, River jobs and gateway calls go to an OTLP collector when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and nowhere otherwise (the no-op
// provider costs next to nothing, so the instrumentation stays in place).
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Setup installs the process' tracer provider and W3C trace-context
// propagation (an incoming traceparent continues the caller's trace). With
// an empty endpoint it installs the no-op provider. The returned function
// flushes the spans still buffered; call it on shutdown.
func Setup(ctx context.Context, endpoint, version string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if endpoint == "" {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}
	// The explicit URL wins over the exporter's own reading of the
	// variable, so that it comes from the same configuration as the rest.
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "rebill"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	return provider.Shutdown, nil
}

// Handler opens a server span for each request to h. The span is named by
// method only at first (the raw path holds ids); the router renames it
// after its route pattern once it knows it.
func Handler(h http.Handler, provider trace.TracerProvider) http.Handler {
	return otelhttp.NewHandler(h, "rebill",
		otelhttp.WithTracerProvider(provider),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}
