package sim_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/zhkh/party/sim"
	"github.com/rebill/rebill/zhkh/party/testkit/partytest"
)

// The simulated party passes the parties' conformance suite: dev mode's
// party behaves as a production one must.
func TestSimConformance(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	var n atomic.Int64
	partytest.Run(t, func(t *testing.T) partytest.Harness {
		// A party of its own: its fault switches touch no other case.
		s := sim.Sim{Pool: pool, Names: []string{fmt.Sprintf("conf%d", n.Add(1))}}
		set := func(t *testing.T, patch sim.FaultsPatch) {
			_, err := s.SetFaults(context.Background(), s.Names[0], patch)
			require.NoError(t, err)
		}
		return partytest.Harness{
			Party:       s.Parties()[0],
			LoseAnswers: func(t *testing.T, on bool) { set(t, sim.FaultsPatch{LoseResponse: &on}) },
			Unavailable: func(t *testing.T, on bool) { set(t, sim.FaultsPatch{Down: &on}) },
			Processing:  func(t *testing.T, looks int) { set(t, sim.FaultsPatch{Processing: &looks}) },
			Refuse:      func(t *testing.T, reason string) { set(t, sim.FaultsPatch{Refuse: &reason}) },
		}
	})
}
