package testsupport_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/testkit/testsupport"
)

var (
	_ clock.Clock             = (*testsupport.Clock)(nil)
	_ rivertype.TimeGenerator = (*testsupport.Clock)(nil)
)

func TestClock(t *testing.T) {
	t.Parallel()

	start := time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))

	t.Run("StandsStillInUTCMicroseconds", func(t *testing.T) {
		t.Parallel()
		c := testsupport.NewClock(start)
		want := time.Date(2026, 12, 1, 8, 0, 0, 123456000, time.UTC)
		require.Equal(t, want, c.Now())
		require.Equal(t, want, c.Now())
		require.Equal(t, want, *c.NowOrNil())
	})

	t.Run("AdvanceAndSet", func(t *testing.T) {
		t.Parallel()
		c := testsupport.NewClock(start)
		at := c.Advance(time.Hour)
		require.Equal(t, at, c.Now())
		require.Equal(t, time.Date(2026, 12, 1, 9, 0, 0, 123456000, time.UTC), at)
		c.Set(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
		require.Equal(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), c.Now())
	})
}

func TestLockedBuffer(t *testing.T) {
	t.Parallel()
	var b testsupport.LockedBuffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { _, _ = fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	require.Len(t, b.String(), 50*len("line 00\n")-10) // ten one-digit lines
	require.Contains(t, b.String(), "line 49\n")
}
