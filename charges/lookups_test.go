package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
)

// ByKeys finds the charge a gateway key names whoever owns it: a
// subscription's period or an enrollment's bill, whose id may hold ':'.
// Reconciliation and the audit take any key it misses for a capture
// nobody asked for.
func TestByKeysFindsChargesOfEveryOwner(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	sub := opstest.Subscription(t, pool, "simk", at)
	enr := opstest.Enrollment(t, pool, "simk", at)
	period, periodKey := opstest.InsertCharge(t, pool, opstest.Charge{Subscription: sub, PeriodStart: at, Gateway: "simk", Status: "succeeded"})
	bill, billKey := opstest.InsertCharge(t, pool, opstest.Charge{Enrollment: enr, BillID: "2026-11", PeriodStart: at, Gateway: "simk",
		Status: "succeeded"})
	colons, colonsKey := opstest.InsertCharge(t, pool, opstest.Charge{Enrollment: enr, BillID: "inv:2026:11:a1", PeriodStart: at,
		Gateway: "simk", Status: "succeeded"})

	for _, k := range []string{periodKey, billKey, colonsKey} {
		parsed, attempt, _, ok := charges.ParseGatewayKey(k + ":a3:capture")
		require.True(t, ok, k)
		require.Equal(t, k, parsed)
		require.Equal(t, 3, attempt)
	}
	got, err := charges.ByKeys(ctx, pool, []string{periodKey, billKey, colonsKey,
		// Keys that name nothing: another owner, a bill id's prefix, no
		// owner at all.
		uuid.NewString() + ":2026-11", enr.String() + ":inv:2026", "inv:2026:11:a1", "not-a-key"})
	require.NoError(t, err)
	ids := map[uuid.UUID]string{}
	for _, c := range got {
		ids[c.ID] = c.Key()
	}
	require.Equal(t, map[uuid.UUID]string{period: periodKey, bill: billKey, colons: colonsKey}, ids)
}
