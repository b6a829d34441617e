package gisgmp_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/gisgmp"
	"github.com/rebill/rebill/gisgmp/gisgmptest"
	"github.com/rebill/rebill/internal/dbtest"
)

// The simulated book passes the registry gateways' conformance suite: dev
// mode's registry behaves as a production one must.
func TestSimConformance(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	var n atomic.Int64
	gisgmptest.Run(t, func(t *testing.T) gisgmptest.Harness {
		// A gateway of its own: its fault switches touch no other case.
		sim := gisgmp.Sim{Pool: pool, Names: []string{fmt.Sprintf("conf%d", n.Add(1))}}
		name := sim.Names[0]
		set := func(t *testing.T, patch gisgmp.FaultsPatch) {
			_, err := sim.SetFaults(context.Background(), name, patch)
			require.NoError(t, err)
		}
		return gisgmptest.Harness{
			Gateway: sim.Gateways()[0],
			PaidOutside: func(t *testing.T, uin string, amount int64) string {
				e, err := sim.PaidOutside(context.Background(), uin, amount)
				require.NoError(t, err)
				return e.PaymentID
			},
			LoseAnswers: func(t *testing.T, on bool) { set(t, gisgmp.FaultsPatch{LoseResponse: &on}) },
			Unavailable: func(t *testing.T, on bool) { set(t, gisgmp.FaultsPatch{Down: &on}) },
			Processing:  func(t *testing.T, looks int) { set(t, gisgmp.FaultsPatch{Processing: &looks}) },
		}
	})
}
