package riverjob_test

import (
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/riverjob"
)

// A step enqueued again after its job was discarded or cancelled must be
// refused too, or a charge attempt could be sent to the gateway twice.
func TestUniqueForeverCoversEveryState(t *testing.T) {
	t.Parallel()
	u := riverjob.UniqueForever()
	require.True(t, u.ByArgs, "unique per step, not per kind")
	require.ElementsMatch(t, []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted,
		rivertype.JobStateDiscarded, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled,
	}, u.ByState)
}

// One at a time: a finished scan must not block the next one.
func TestOneAtATimeLeavesFinishedJobsOut(t *testing.T) {
	t.Parallel()
	u := riverjob.OneAtATime()
	require.False(t, u.ByArgs, "one per kind whatever its args")
	require.ElementsMatch(t, []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateScheduled, rivertype.JobStateRetryable,
	}, u.ByState)
}

// Each call returns its own list: a caller that edits one cannot change
// the rule every other job kind follows.
func TestRulesAreNotShared(t *testing.T) {
	t.Parallel()
	a := riverjob.UniqueForever()
	a.ByState[0] = rivertype.JobStateCompleted
	require.Equal(t, rivertype.JobStateAvailable, riverjob.UniqueForever().ByState[0])
	b := riverjob.OneAtATime()
	b.ByState[0] = rivertype.JobStateCompleted
	require.Equal(t, rivertype.JobStateAvailable, riverjob.OneAtATime().ByState[0])
}
