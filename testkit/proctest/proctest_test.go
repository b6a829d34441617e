package proctest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// A process that exits before it is ready is reported at once, with its
// output, instead of being waited on until the deadline.
func TestWaitReadyReportsAnEarlyExit(t *testing.T) {
	t.Parallel()
	p, err := proctest.Start("version", proctest.Options{Args: []string{"version"}, Dir: t.TempDir()})
	require.NoError(t, err)
	start := time.Now()
	err = p.WaitReady(time.Minute)
	require.ErrorContains(t, err, "exited before it was ready")
	require.Less(t, time.Since(start), 30*time.Second)
	require.True(t, p.Exited())
	require.Equal(t, 0, p.ExitState().ExitCode())
	require.NotEmpty(t, strings.TrimSpace(p.Output()), "its output is kept")
}

func TestTail(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", proctest.Tail("abc", 3))
	require.Equal(t, "...\nbc", proctest.Tail("abc", 2))
}
