package fleet

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// answered lists the call outcomes that are the gateway's verdict; the
// others (unavailable, unknown, circuit_open, error) mean it gave none.
var answered = map[string]bool{
	string(gateway.StatusSucceeded): true, string(gateway.StatusDeclined): true,
	string(gateway.StatusFailed): true, "not_found": true,
}

// callOutcomes is every outcome a call ends with: the closed set of
// rebill_gateway_calls_total's outcome label.
var callOutcomes = []string{string(gateway.StatusSucceeded), string(gateway.StatusDeclined), string(gateway.StatusFailed),
	"not_found", "unprovable", "circuit_open", "unavailable", "unknown", "error"}

// zeroCallMetrics creates a gateway's call series at 0 for every operation
// and outcome, so that the first call of a kind is an increase (from 0 to
// 1) that rate() and increase() see, not the birth of a series at 1.
func zeroCallMetrics(name string) {
	for _, op := range []gateway.Op{gateway.OpAuthorize, gateway.OpCapture, gateway.OpVoid, gateway.OpRefund} {
		metrics.GatewayCallDuration.WithLabelValues(name, string(op))
		for _, outcome := range callOutcomes {
			metrics.GatewayCalls.WithLabelValues(name, string(op), outcome)
		}
	}
}

// Call is one gateway call as traces and the gateway-health panels see
// it: the gateway and operation, and the charge attempt that made it. It
// holds no token and no card, so nothing secret can reach a span.
type Call struct {
	Gateway        string
	Op             gateway.Op
	ChargeID       uuid.UUID
	SubscriptionID uuid.UUID
	Attempt        int
}

// Start opens the span of the call; a nil tracer traces nothing.
func (c Call) Start(ctx context.Context, tracer trace.Tracer) (context.Context, trace.Span) {
	if tracer == nil {
		tracer = noop.Tracer{}
	}
	return tracer.Start(ctx, "gateway."+string(c.Op), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("rebill.gateway", c.Gateway),
		attribute.String("rebill.gateway.op", string(c.Op)),
		attribute.String("rebill.charge_id", c.ChargeID.String()),
		attribute.String("rebill.subscription_id", c.SubscriptionID.String()),
		attribute.Int("rebill.attempt", c.Attempt),
	))
}

// End closes the call's span and counts the call for the gateway-health
// panels and alerts. outcome is one of callOutcomes.
func (c Call) End(span trace.Span, outcome, declineCode string, elapsed time.Duration) {
	metrics.GatewayCalls.WithLabelValues(c.Gateway, string(c.Op), outcome).Inc()
	metrics.GatewayCallDuration.WithLabelValues(c.Gateway, string(c.Op)).Observe(elapsed.Seconds())
	span.SetAttributes(attribute.String("rebill.gateway.outcome", outcome))
	if declineCode != "" {
		span.SetAttributes(attribute.String("rebill.gateway.decline_code", declineCode))
	}
	if !answered[outcome] {
		span.SetStatus(codes.Error, "no verdict: "+outcome)
	}
	span.End()
}
