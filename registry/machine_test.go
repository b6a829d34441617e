package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/fsm/fsmtest"
	"github.com/rebill/rebill/registry"
)

func TestPostingTransitions(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, registry.Machine, map[registry.PostingStatus][]registry.PostingStatus{
		registry.StatusPosting:   {registry.StatusAccepted, registry.StatusFailed, registry.StatusCancelled, registry.StatusAnnulled},
		registry.StatusAccepted:  {registry.StatusAnnulled},
		registry.StatusFailed:    nil,
		registry.StatusCancelled: nil,
		registry.StatusAnnulled:  nil,
	})
	require.False(t, registry.CanTransition(registry.StatusAnnulled, registry.StatusAccepted), "an annulment is final")
	require.False(t, registry.CanTransition(registry.StatusAccepted, registry.StatusCancelled),
		"a payment the registry holds is annulled, never just forgotten")
}

// No SQL names a posting's status: conditions are built from the
// constants. The simulated registry keeps its own ledger, with statuses
// of its own.
func TestNoPostingStatusLiteral(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoLiterals(t, registry.PostingStatuses, "registry/sim.go")
}
