package charges_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
)

func TestRetryDelayIsCappedFullJitter(t *testing.T) {
	t.Parallel()
	p := charges.RetryPolicy{Base: time.Second, Max: 10 * time.Second}
	for _, tc := range []struct {
		retry   int
		ceiling time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {50, 10 * time.Second}} {
		var maxSeen time.Duration
		for i := 0; i < 2000; i++ {
			d := p.Delay(tc.retry)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, tc.ceiling, "retry %d", tc.retry)
			maxSeen = max(maxSeen, d)
		}
		require.Greater(t, maxSeen, tc.ceiling/2, "retry %d: the jitter spans the whole range", tc.retry)
	}
}

func TestNextRetryCountsFromPolicyClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	p := charges.RetryPolicy{Base: time.Second, Max: 10 * time.Second, Now: func() time.Time { return now }}
	job := &rivertype.JobRow{Errors: make([]rivertype.AttemptError, 2)} // third try: ceiling 4s
	for i := 0; i < 200; i++ {
		at := p.NextRetry(job)
		require.False(t, at.Before(now))
		require.False(t, at.After(now.Add(4*time.Second)))
	}
}

func TestDunningSchedule(t *testing.T) {
	t.Parallel()
	d := charges.Dunning{24 * time.Hour, 72 * time.Hour, 120 * time.Hour, 168 * time.Hour}
	first := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for attempt, want := range map[int]time.Duration{1: 24 * time.Hour, 2: 72 * time.Hour, 3: 120 * time.Hour, 4: 168 * time.Hour} {
		at, ok := d.NextAttempt(first, attempt)
		require.True(t, ok)
		require.Equal(t, first.Add(want), at, "after attempt %d", attempt)
	}
	_, ok := d.NextAttempt(first, 5)
	require.False(t, ok, "four retries, then dunning is exhausted")
}

func TestKeysAreDeterministic(t *testing.T) {
	t.Parallel()
	sub := uuid.MustParse("01a22a46-8ccb-7552-b728-afde6e0d5473")
	c := charges.Charge{SubscriptionID: sub, PeriodKey: "2026-12-01", AttemptCount: 2}
	require.Equal(t, "01a22a46-8ccb-7552-b728-afde6e0d5473:2026-12-01", c.Key())
	require.Equal(t, c.Key()+":a2:authorize", c.GatewayKey(gateway.OpAuthorize))
	require.Equal(t, c.Key()+":a2:capture", c.GatewayKey(gateway.OpCapture))
}

func TestReviewCursorRoundTrip(t *testing.T) {
	t.Parallel()
	in := charges.ReviewCursor{At: time.Date(2026, 12, 1, 9, 0, 0, 123000, time.UTC), ID: uuid.New()}
	out, err := charges.ParseReviewCursor(in.String())
	require.NoError(t, err)
	require.Equal(t, in, out)
	for _, bad := range []string{"", "x", "12|not-a-uuid", "abc|" + uuid.NewString()} {
		_, err := charges.ParseReviewCursor(bad)
		require.Error(t, err, bad)
	}
}
