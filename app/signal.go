package app

import (
	"context"
	"os/signal"
	"syscall"
)

// signalContext is cancelled on SIGINT or SIGTERM, which starts a graceful
// shutdown.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}
