package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/platform/metrics"
)

// A call is counted under its gateway, operation and outcome, and its span
// names the charge attempt; a call that got no verdict marks the span as
// an error, a decline does not (it is the gateway's answer).
func TestCallIsCountedAndTraced(t *testing.T) {
	t.Parallel()
	recorder := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("test")
	charge, sub := uuid.MustParse("00000000-0000-0000-0000-0000000000c1"), uuid.MustParse("00000000-0000-0000-0000-0000000000a1")
	call := fleet.Call{Gateway: "observed", Op: gateway.OpCapture, ChargeID: charge, SubscriptionID: sub, Attempt: 2}
	calls := func(outcome string) float64 {
		return testutil.ToFloat64(metrics.GatewayCalls.WithLabelValues("observed", "capture", outcome))
	}

	_, span := call.Start(context.Background(), tracer)
	call.End(span, "declined", "insufficient_funds", 10*time.Millisecond)
	_, span = call.Start(context.Background(), tracer)
	call.End(span, "unknown", "", time.Second)

	require.Equal(t, 1.0, calls("declined"))
	require.Equal(t, 1.0, calls("unknown"))
	require.Equal(t, 0.0, calls("succeeded"))
	ended := recorder.Ended()
	require.Len(t, ended, 2)
	require.Equal(t, "gateway.capture", ended[0].Name())
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range ended[0].Attributes() {
		attrs[a.Key] = a.Value
	}
	require.Equal(t, charge.String(), attrs["rebill.charge_id"].AsString())
	require.Equal(t, sub.String(), attrs["rebill.subscription_id"].AsString())
	require.Equal(t, int64(2), attrs["rebill.attempt"].AsInt64())
	require.Equal(t, "insufficient_funds", attrs["rebill.gateway.decline_code"].AsString())
	require.Equal(t, codes.Unset, ended[0].Status().Code, "a decline is an answer")
	require.Equal(t, codes.Error, ended[1].Status().Code, "no verdict")
}

// A nil tracer traces nothing and still counts the call.
func TestCallWithoutTracerIsCounted(t *testing.T) {
	t.Parallel()
	call := fleet.Call{Gateway: "untraced", Op: gateway.OpVoid}
	_, span := call.Start(context.Background(), nil)
	call.End(span, "succeeded", "", time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.GatewayCalls.WithLabelValues("untraced", "void", "succeeded")))
}
