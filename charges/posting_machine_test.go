package charges_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/fsmtest"
)

func TestPostingTransitions(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, charges.PostingMachine, map[charges.PostingStatus][]charges.PostingStatus{
		charges.PostingPosting: {charges.PostingAccepted, charges.PostingFailed, charges.PostingCancelled, charges.PostingAnnulled,
			charges.PostingAbandoned},
		charges.PostingAccepted:  {charges.PostingAnnulled},
		charges.PostingAbandoned: {charges.PostingAnnulled, charges.PostingFailed},
		charges.PostingFailed:    nil,
		charges.PostingCancelled: nil,
		charges.PostingAnnulled:  nil,
	})
	require.False(t, charges.CanPostingTransition(charges.PostingAnnulled, charges.PostingAccepted), "an annulment is final")
	require.False(t, charges.CanPostingTransition(charges.PostingAccepted, charges.PostingCancelled),
		"a payment the registry holds is annulled, never just forgotten")
	require.False(t, charges.CanPostingTransition(charges.PostingAbandoned, charges.PostingAccepted),
		"an abandoned posting's money is released: it is never captured, whatever the registry says")
	require.False(t, charges.CanPostingTransition(charges.PostingAbandoned, charges.PostingCancelled),
		"an abandoned posting was sent: it ends on the registry's word, annulled or failed")
}

// No SQL names a posting's status: conditions are built from the
// constants. The simulated registry keeps its own ledger, with statuses
// of its own.
func TestNoPostingStatusLiteral(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoLiterals(t, charges.PostingStatuses, "charges/registry/sim/sim.go")
}
