package client

import (
	"context"
	"time"
)

// Jitter fixes the random draw of retry waits (0 lowest, towards 1 highest).
func Jitter(f float64) Option { return func(s *settings) { s.jitter = func() float64 { return f } } }

// Sleeps records the waits instead of sleeping.
func Sleeps(waits *[]time.Duration) Option {
	return func(s *settings) {
		s.sleep = func(ctx context.Context, d time.Duration) error {
			*waits = append(*waits, d)
			return ctx.Err()
		}
	}
}
