package sim_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/testkit/dbtest"
)

// The simulated book passes the registry gateways' conformance suite: dev
// mode's registry behaves as a production one must.
func TestSimConformance(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	var n atomic.Int64
	registrytest.Run(t, func(t *testing.T) registrytest.Harness {
		// A gateway of its own: its fault switches touch no other case.
		s := sim.Sim{Pool: pool, Names: []string{fmt.Sprintf("conf%d", n.Add(1))}}
		name := s.Names[0]
		set := func(t *testing.T, patch sim.FaultsPatch) {
			_, err := s.SetFaults(context.Background(), name, patch)
			require.NoError(t, err)
		}
		return registrytest.Harness{
			Gateway: s.Gateways()[0],
			PaidOutside: func(t *testing.T, uin string, amount int64) string {
				e, err := s.PaidOutside(context.Background(), uin, amount)
				require.NoError(t, err)
				return e.PaymentID
			},
			LoseAnswers: func(t *testing.T, on bool) { set(t, sim.FaultsPatch{LoseResponse: &on}) },
			Unavailable: func(t *testing.T, on bool) { set(t, sim.FaultsPatch{Down: &on}) },
			Processing:  func(t *testing.T, looks int) { set(t, sim.FaultsPatch{Processing: &looks}) },
		}
	})
}
