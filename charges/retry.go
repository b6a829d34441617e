package charges

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// RetryPolicy is capped exponential backoff with full jitter for technical
// retries: the n-th retry waits a uniformly random time in
// [0, min(Max, Base*2^(n-1))]. Full jitter spreads a burst of failures (a
// gateway outage) so that the retries do not arrive together. It uses real
// time, like all of River's scheduling: Now is the wall clock, never the
// dev clock, which stands still between advances.
type RetryPolicy struct {
	Base time.Duration
	Max  time.Duration
	Now  func() time.Time
}

// NextRetry implements river.ClientRetryPolicy.
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return p.Now().Add(p.Delay(len(job.Errors) + 1))
}

// Delay is the jittered wait before retry number n (n >= 1).
func (p RetryPolicy) Delay(n int) time.Duration {
	ceiling := p.Base
	for i := 1; i < n && ceiling < p.Max; i++ {
		ceiling *= 2
	}
	if ceiling > p.Max {
		ceiling = p.Max
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// Dunning is the schedule of business retries after a soft decline: the
// offsets, from the first decline, of each new attempt.
type Dunning []time.Duration

// NextAttempt returns when attempt (the one that was just declined, from 1)
// should be followed by another, or ok=false when dunning is exhausted.
func (d Dunning) NextAttempt(firstDeclined time.Time, attempt int) (at time.Time, ok bool) {
	if attempt < 1 || attempt > len(d) {
		return time.Time{}, false
	}
	return firstDeclined.Add(d[attempt-1]), true
}
