package fsmtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The splice detector must be able to fail: it finds a status of another
// package spliced between quotes, formatted into them and quoted by
// fsm.Quoted, and lets alone parameters, prose, a constant of the same
// word declared elsewhere and the owner's own fsm.Quoted.
func TestSpliceDetector(t *testing.T) {
	t.Parallel()
	offenders, files, err := spliceOffenders("testdata/splices", "example.com/m", "machine",
		map[string]bool{"open": true, "closed": true}, map[string]bool{})
	require.NoError(t, err)
	require.Equal(t, 2, files)
	require.Equal(t, []string{
		"user/user.go: a status spliced between quotes",
		"user/user.go: a status formatted between quotes",
		"user/user.go: fsm.Quoted of another package's status",
	}, offenders)
}
