package app

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/platform/startup"
)

// openPool connects to DATABASE_URL, or starts (or attaches to) the private
// cluster when it is empty. stop releases what was opened.
func openPool(ctx context.Context, cfg config.Config, log zerolog.Logger) (pool *pgxpool.Pool, stop func(), err error) {
	url := cfg.DatabaseURL
	stopCluster := func() {}
	if url == "" {
		dataDir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pg"))
		if err != nil {
			return nil, nil, fmt.Errorf("data folder: %w", err)
		}
		cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: dataDir})
		if err != nil {
			return nil, nil, fmt.Errorf("start the private PostgreSQL cluster (or set DATABASE_URL): %w", err)
		}
		log.Info().Str("data_dir", dataDir).Msg("private PostgreSQL cluster running")
		stopCluster = func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := cluster.Stop(stopCtx); err != nil {
				log.Error().Err(err).Msg("stopping the private PostgreSQL cluster")
			}
		}
		if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "create the private cluster's database", func() error {
			return ensureDatabase(ctx, cluster.URL("postgres"), "rebill")
		}); err != nil {
			stopCluster()
			return nil, nil, err
		}
		url = cluster.URL("rebill")
	}
	poolCfg, err := config.ParsePoolConfig(url)
	if err != nil {
		stopCluster()
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		poolCfg.MaxConns, _, _ = poolSizes(cfg)
	}
	pool, err = pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		stopCluster()
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "connect to the database", func() error {
		return pool.Ping(ctx)
	}); err != nil {
		pool.Close()
		stopCluster()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); stopCluster() }, nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the private cluster: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var again bool
		if qerr := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&again); qerr == nil && again {
			return nil // another process created it meanwhile
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// poolSizes splits REBILL_DB_MAX_CONNS, one node's whole budget, between
// the service's pool and, in dev mode, the in-process simulated gateways'
// pool (a fifth, at least 2) and the dev clock's (2). River takes its
// LISTEN connection out of the service's pool (the pool may then open
// another), so one is kept for it. Requests, scans and jobs share the rest:
// no gateway call holds a connection, so 200 workers need far fewer.
func poolSizes(cfg config.Config) (service, sim, devClock int32) {
	total := int32(max(cfg.DBMaxConns, 8))
	if cfg.Dev {
		sim, devClock = max(2, total/5), 2
	}
	return max(2, total-sim-devClock-1), sim, devClock
}

// openMigrated is openPool followed by the migrations every command needs.
// preflight refuses, before the database is touched (no migration, no
// first admin key printed), a configuration serve would refuse later
// anyway: no encryption key outside dev mode, a registry entry that
// cannot be built.
func preflight(cfg config.Config, log zerolog.Logger) error {
	if !cfg.Dev {
		if _, err := keyring(cfg, log); err != nil {
			return err
		}
	}
	// The sim entries (dev mode only) reach their book through the pool
	// only when called: building them needs none.
	if _, _, err := registryGateways(cfg.Registries, nil, clock.Wall{}, log); err != nil {
		return fmt.Errorf("REBILL_REGISTRY_FILE: %w", err)
	}
	return nil
}

func openMigrated(ctx context.Context, cfg config.Config, log zerolog.Logger) (*pgxpool.Pool, func(), error) {
	pool, stop, err := openPool(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "migrate", func() error {
		return migrations.Up(ctx, pool)
	}); err != nil {
		stop()
		return nil, nil, err
	}
	return pool, stop, nil
}

func migrate(ctx context.Context, cfg config.Config, log zerolog.Logger, stdout io.Writer) error {
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	statuses, err := migrations.List(ctx, pool)
	if err != nil {
		return err
	}
	for _, s := range statuses {
		state := "pending"
		if s.Applied {
			state = "applied"
		}
		fmt.Fprintf(stdout, "%-7s %5d  %-8s %s\n", s.Source, s.Version, state, s.Name)
	}
	return nil
}
