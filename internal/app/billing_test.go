package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenOKChargesOnceAtCreation(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_ok_visa", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 1, cs[0]["attempt_count"])
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestLostResponseEndsSucceededWithOneOfEach(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_lost_response_1", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestFlakyGatewayIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_flaky_1", "month")
	cs := b.waitCharges(t, sub, 1, "succeeded")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:succeeded": 1, "capture:succeeded": 1}, ops)
}

func TestHardDeclineSkipsDunning(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_decline_hard", "month")
	cs := b.waitCharges(t, sub, 1, "failed")
	require.Nil(t, cs[0]["next_attempt_at"])
	got := b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)
	require.Equal(t, "unpaid", got["status"])
	b.advance(t, "240h")
	b.waitCharges(t, sub, 1, "failed")
	ops := opsFor(b.ledger(t, "sim1"), cs[0]["key"].(string))
	require.Equal(t, map[string]int{"authorize:declined": 1}, ops, "no retry, no capture")
}
