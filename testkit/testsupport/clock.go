package testsupport

import (
	"sync"
	"time"
)

// Clock is a manual clock for tests: it stands still until Set or Advance
// moves it, and it is safe for concurrent use. It implements
// platform/clock.Clock (the domain's "now"), and River's
// rivertype.TimeGenerator, so a test can give River
// (river.Config.Test.Time) the same time as the code under test: jobs are
// then created and scheduled at instants the test can compare exactly.
//
// Times are UTC with microsecond precision, the precision PostgreSQL keeps,
// so a time written to the database and read back compares equal.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: normalize(start)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NowOrNil returns the clock's time: for River, a test clock is always
// stubbed.
func (c *Clock) NowOrNil() *time.Time {
	now := c.Now()
	return &now
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = normalize(t)
}

// Advance moves the clock by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = normalize(c.now.Add(d))
	return c.now
}

func normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
