package charges

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/internal/metrics"
)

// answered lists the call outcomes that are the gateway's verdict; the
// others (unavailable, unknown, circuit_open, error) mean it gave none.
var answered = map[string]bool{
	string(gateway.StatusSucceeded): true, string(gateway.StatusDeclined): true,
	string(gateway.StatusFailed): true, "not_found": true,
}

// callOutcomes is every outcome call names: the closed set of
// rebill_gateway_calls_total's outcome label.
var callOutcomes = []string{string(gateway.StatusSucceeded), string(gateway.StatusDeclined), string(gateway.StatusFailed),
	"not_found", "unprovable", "circuit_open", "unavailable", "unknown", "error"}

// zeroCallMetrics creates a gateway's call series at 0 for every operation
// and outcome, so that the first call of a kind is an increase (from 0 to
// 1) that rate() and increase() see, not the birth of a series at 1.
func zeroCallMetrics(name string) {
	for _, op := range []gateway.Op{gateway.OpAuthorize, gateway.OpCapture, gateway.OpVoid} {
		metrics.GatewayCallDuration.WithLabelValues(name, string(op))
		for _, outcome := range callOutcomes {
			metrics.GatewayCalls.WithLabelValues(name, string(op), outcome)
		}
	}
}

// startCall opens the span of one gateway call. Its attributes name the
// charge and the gateway, never the token or the card.
func (p *Pipeline) startCall(ctx context.Context, c Charge, op gateway.Op) (context.Context, trace.Span) {
	tracer := p.Tracer
	if tracer == nil {
		tracer = noop.Tracer{}
	}
	return tracer.Start(ctx, "gateway."+string(op), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("rebill.gateway", c.Gateway),
		attribute.String("rebill.gateway.op", string(op)),
		attribute.String("rebill.charge_id", c.ID.String()),
		attribute.String("rebill.subscription_id", c.SubscriptionID.String()),
		attribute.Int("rebill.attempt", c.AttemptCount),
	))
}

// endCall closes a gateway call's span and counts the call for the
// gateway-health panels and alerts.
func endCall(span trace.Span, c Charge, op gateway.Op, outcome, declineCode string, elapsed time.Duration) {
	metrics.GatewayCalls.WithLabelValues(c.Gateway, string(op), outcome).Inc()
	metrics.GatewayCallDuration.WithLabelValues(c.Gateway, string(op)).Observe(elapsed.Seconds())
	span.SetAttributes(attribute.String("rebill.gateway.outcome", outcome))
	if declineCode != "" {
		span.SetAttributes(attribute.String("rebill.gateway.decline_code", declineCode))
	}
	if !answered[outcome] {
		span.SetStatus(codes.Error, "no verdict: "+outcome)
	}
	span.End()
}
