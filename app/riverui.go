package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"riverqueue.com/riverui"
)

// riverUIPrefix is where River UI is served; its handler strips the
// prefix itself.
const riverUIPrefix = "/riverui"

// startRiverUI builds River UI over the node's River client and starts its
// background caches, which run until stop is called. Job arguments are
// hidden by default in lists: they hold ids, never card data, but support
// staff need not see them at a glance.
func startRiverUI(ctx context.Context, client *river.Client[pgx.Tx], log zerolog.Logger) (ui *riverui.Handler, stop func(), err error) {
	ui, err = riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints:                riverui.NewEndpoints(client, nil),
		Logger:                   riverLogger(log),
		Prefix:                   riverUIPrefix,
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create River UI: %w", err)
	}
	// The caches live as long as the node, not as the context Build got.
	uiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := ui.Start(uiCtx); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("start River UI: %w", err)
	}
	return ui, cancel, nil
}
