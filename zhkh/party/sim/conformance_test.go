package sim_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/zhkh/party"
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

// A party whose error rate is 1 fails every call before it reaches the
// ledger, as one out of reach: nothing is held, and a report made once the
// rate is back to 0 is.
func TestSimErrorRate(t *testing.T) {
	t.Parallel()
	s := sim.Sim{Pool: dbtest.Pool(t)}
	ctx := context.Background()
	p := s.Parties()[0]
	one, zero := 1.0, 0.0
	f, err := s.SetFaults(ctx, "zhkh1", sim.FaultsPatch{ErrorRate: &one})
	require.NoError(t, err)
	require.Equal(t, 1.0, f.ErrorRate)
	pay := party.Payment{ReportID: "r1", Account: "75ДА533315", BillID: "b1", Amount: 100, Currency: "RUB", PaidAt: time.Now()}
	require.ErrorIs(t, p.Report(ctx, pay), party.ErrUnavailable)
	require.ErrorIs(t, p.Cancel(ctx, "r1"), party.ErrUnavailable)
	_, _, err = p.Lookup(ctx, "r1")
	require.ErrorIs(t, err, party.ErrUnavailable)
	ledger, err := s.Ledger(ctx)
	require.NoError(t, err)
	require.Empty(t, ledger)
	_, err = s.SetFaults(ctx, "zhkh1", sim.FaultsPatch{ErrorRate: &zero})
	require.NoError(t, err)
	require.NoError(t, p.Report(ctx, pay))
	ledger, err = s.Ledger(ctx)
	require.NoError(t, err)
	require.Len(t, ledger, 1)
}
