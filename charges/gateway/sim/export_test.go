package sim

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/platform/clock"
)

// StartInMemoryOnClock is [StartInMemory] stamping operations with clk, so
// that a test can move the time the in-memory books decide by.
func StartInMemoryOnClock(ctx context.Context, clk clock.Clock, names []string, logger zerolog.Logger) (string, func(context.Context) error, error) {
	return startOn(ctx, newMemoryBooks(clk), names, logger)
}
