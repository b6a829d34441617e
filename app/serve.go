package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/platform/startup"
	"github.com/rebill/rebill/platform/tracing"
)

// riverLogger routes River's own logs through zerolog at warn and above.
func riverLogger(log zerolog.Logger) *slog.Logger {
	return slog.New(zerolog.NewSlogHandler(log.Level(zerolog.WarnLevel).With().Str("component", "river").Logger()))
}

func serve(ctx context.Context, cfg config.Config, log zerolog.Logger, stdout io.Writer) error {
	if err := preflight(cfg, log); err != nil {
		return err
	}
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	if cfg.AdminKey == "" {
		var key apikeys.Created
		var created bool
		if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "create the first admin key", func() (err error) {
			key, created, err = apikeys.NewStore(pool, "").EnsureFirstAdmin(ctx)
			return err
		}); err != nil {
			return err
		}
		if created {
			fmt.Fprintf(stdout, "\nFirst start: created an admin API key. It is shown once; only its hash is stored.\n\n    %s\n\nexport REBILL_KEY=%s\n\n", key.Secret, key.Secret)
		}
	}
	if cfg.Dev && cfg.EncryptionKey == nil {
		if cfg.EncryptionKey, err = devEncryptionKey(cfg.DataDir); err != nil {
			return err
		}
	}
	stopTracing, err := tracing.Setup(ctx, cfg.OTLPEndpoint, buildVersion())
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			log.Warn().Err(err).Msg("flush traces")
		}
	}()
	svc, err := Build(ctx, cfg, pool, log)
	if err != nil {
		return err
	}
	defer svc.Close()
	stopMetrics, err := startMetrics(ctx, cfg, log, pool)
	if err != nil {
		return err
	}
	defer stopMetrics(context.Background()) // a failed start; after a clean shutdown a no-op

	listener, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	httpServer := &http.Server{Handler: svc.Handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "start River", func() error {
		return svc.River.Start(ctx)
	}); err != nil {
		_ = listener.Close()
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(listener) }()
	log.Info().Str("addr", "http://"+listener.Addr().String()).Bool("dev", cfg.Dev).Msg("rebill listening")

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("HTTP server failed")
		}
	}
	log.Info().Msg("shutting down: draining requests and jobs")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		log.Error().Err(err).Msg("HTTP shutdown")
	}
	stopMetrics(shutdownCtx)
	if err := svc.River.Stop(shutdownCtx); err != nil {
		log.Error().Err(err).Msg("River shutdown")
	}
	log.Info().Msg("stopped")
	return nil
}

// devEncryptionKey is dev mode's REBILL_ENCRYPTION_KEY: kept in the data
// folder (encryption.key, mode 0600), generated on the first start, so
// that payment tokens and webhook secrets survive restarts. Nodes started
// at once on one folder agree on it: the file appears whole and only once
// (a hard link, which fails if another node made it first).
func devEncryptionKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "encryption.key")
	if raw, err := os.ReadFile(path); err == nil {
		return secrets.ParseKey(string(raw))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read dev encryption key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, "encryption.key.*")
	if err != nil {
		return nil, fmt.Errorf("write dev encryption key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(secrets.NewKey() + "\n")
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("write dev encryption key: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dev encryption key: %w", err)
	}
	return secrets.ParseKey(string(raw))
}
