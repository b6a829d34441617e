package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A tok_funds_after_3d card on the default dunning schedule, as
// docs/dev-mode.md states: declined at the first attempt and at +1 day,
// paid at the +3 day attempt. A second subscription's card, another token,
// counts from its own first attempt.
func TestRecoveringCardPaysAtTheThirdDayAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	sub := b.createSubscription(t, "tok_funds_after_3d_cust1", "month")
	cs := b.waitCharges(t, sub, 1, "declined")
	require.Equal(t, "insufficient_funds", cs[0]["failure_code"])
	require.Equal(t, "past_due", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])

	b.advance(t, "24h")
	require.Eventually(t, func() bool {
		c := b.charges(t, sub)[0]
		return c["attempt_count"] == float64(2) && c["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond, "the +1 day attempt is declined")
	late := b.createSubscription(t, "tok_funds_after_3d_cust2", "month")
	b.waitCharges(t, late, 1, "declined")

	b.advance(t, "48h")
	cs = b.waitCharges(t, sub, 1, "succeeded")
	require.EqualValues(t, 3, cs[0]["attempt_count"])
	require.Equal(t, "active", b.call(t, http.MethodGet, "/v1/subscriptions/"+sub, nil)["status"])
	key := cs[0]["key"].(string)
	ledger := b.ledger(t, "sim1")
	require.Equal(t, map[string]int{"authorize:declined": 2, "authorize:succeeded": 1, "capture:succeeded": 1}, opsFor(ledger, key))

	require.Eventually(t, func() bool {
		c := b.charges(t, late)[0]
		return c["attempt_count"] == float64(2) && c["status"] == "declined"
	}, 20*time.Second, 50*time.Millisecond, "the second card, first tried a day later, is still short of funds")
	require.Equal(t, "past_due", b.call(t, http.MethodGet, "/v1/subscriptions/"+late, nil)["status"])
}
