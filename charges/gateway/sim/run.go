package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rs/zerolog"
)

// shutdownTimeout bounds the graceful shutdown of ListenAndServe.
const shutdownTimeout = 10 * time.Second

// soleWriterFaultsTTL is how long a sim that is the one writer of its
// switches keeps them: a switch flipped by another writer of the same
// database (which a standalone sim does not expect) takes this long.
const soleWriterFaultsTTL = time.Second

// ListenAndServe runs the sim as its own process (`rebill gatewaysim`): it
// migrates the gatewaysim schema, serves the gateways in names on addr until
// ctx is done, then shuts down gracefully. Operations are stamped with clk
// (see [Store.OnClock]).
func ListenAndServe(ctx context.Context, addr string, pool *pgxpool.Pool, clk clock.Clock, names []string, logger zerolog.Logger) error {
	if err := Migrate(ctx, pool); err != nil {
		return err
	}
	srv, ln, errc, err := start(ctx, addr, NewStore(pool).OnClock(clk).CacheFaults(soleWriterFaultsTTL), names, logger)
	if err != nil {
		return err
	}
	logger.Info().Str("addr", ln.Addr().String()).Strs("gateways", names).Msg("gatewaysim listening")
	select {
	case err := <-errc:
		return fmt.Errorf("gatewaysim serve on %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	return shutdown(sctx, srv, errc)
}

// Start runs the sim inside rebill for dev mode on a free loopback port and
// returns the server's root URL (a gateway's base URL is root + "/" + name)
// and a function that shuts it down; call stop once. ctx bounds only the
// start, not the server's life. Operations are stamped with the wall clock;
// dev mode uses [StartOnClock].
func Start(ctx context.Context, pool *pgxpool.Pool, names []string, logger zerolog.Logger) (baseURL string, stop func(context.Context) error, err error) {
	return StartOnClock(ctx, pool, clock.Wall{}, names, logger)
}

// StartOnClock is [Start] with operations stamped by clk: dev mode passes
// its manual clock, so the sim's books follow the service clock.
func StartOnClock(ctx context.Context, pool *pgxpool.Pool, clk clock.Clock, names []string, logger zerolog.Logger) (baseURL string, stop func(context.Context) error, err error) {
	if err := Migrate(ctx, pool); err != nil {
		return "", nil, err
	}
	return startOn(ctx, NewStore(pool).OnClock(clk), names, logger)
}

// StartSoleWriter is [Start] for a sim that is the one writer of its
// database's fault switches (a benchmark's): it reads them from the
// database only when a second has passed (see [Store.CacheFaults]).
func StartSoleWriter(ctx context.Context, pool *pgxpool.Pool, names []string, logger zerolog.Logger) (baseURL string, stop func(context.Context) error, err error) {
	if err := Migrate(ctx, pool); err != nil {
		return "", nil, err
	}
	return startOn(ctx, NewStore(pool).CacheFaults(soleWriterFaultsTTL), names, logger)
}

// StartInMemory is [Start] with the books in this process's memory: for
// benchmarks that should count rebill's database work and not a
// provider's. The ledger is gone when the process ends, and other
// processes cannot see it or its fault switches.
func StartInMemory(ctx context.Context, names []string, logger zerolog.Logger) (baseURL string, stop func(context.Context) error, err error) {
	return startOn(ctx, newMemoryBooks(clock.Wall{}), names, logger)
}

// StartInMemoryWithBooks is [StartInMemory] with operations stamped by clk,
// for a dev node that keeps its simulators' books in memory; it also
// returns those books, which only this process can read (the node's dev
// endpoints), so only a single node can use them.
func StartInMemoryWithBooks(ctx context.Context, clk clock.Clock, names []string, logger zerolog.Logger) (baseURL string, books Books, stop func(context.Context) error, err error) {
	m := newMemoryBooks(clk)
	baseURL, stop, err = startOn(ctx, m, names, logger)
	if err != nil {
		return "", nil, nil, err
	}
	return baseURL, m, stop, nil
}

func startOn(ctx context.Context, store books, names []string, logger zerolog.Logger) (string, func(context.Context) error, error) {
	srv, ln, errc, err := start(ctx, "127.0.0.1:0", store, names, logger)
	if err != nil {
		return "", nil, err
	}
	stop := func(ctx context.Context) error { return shutdown(ctx, srv, errc) }
	return "http://" + ln.Addr().String(), stop, nil
}

// start migrates, listens on addr and serves in the background; Serve's
// error arrives on the returned channel.
func start(ctx context.Context, addr string, store books, names []string, logger zerolog.Logger) (*http.Server, net.Listener, <-chan error, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gatewaysim listen on %s: %w", addr, err)
	}
	h := newServer(store, names, logger)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	// Shutdown waits for active requests; a lost answer would hold it
	// for a minute.
	srv.RegisterOnShutdown(h.abandonLostResponses)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln, errc, nil
}

// shutdown stops srv gracefully and collects Serve's result.
func shutdown(ctx context.Context, srv *http.Server, errc <-chan error) error {
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("gatewaysim shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gatewaysim serve: %w", err)
	}
	return nil
}
