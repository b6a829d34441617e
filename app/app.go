// Package app wires rebill together: it reads the configuration, opens the
// database (or starts the private cluster), and runs the command asked for.
// cmd/rebill only calls Run, and tests call Run too.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/migrations"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/mtls"
	"github.com/rebill/rebill/platform/pgembed"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/platform/startup"
	"github.com/rebill/rebill/platform/tracing"
)

const usage = `rebill: recurring payments, exactly one charge per period.

Usage:
  rebill serve                  migrate, then serve HTTP and run the workers
  rebill migrate                apply migrations and print their status
  rebill apikey create --role admin|support|customer [--customer ID]
  rebill gatewaysim [--addr ADDR]  run the simulated gateways sim1..sim5 standalone
  rebill registryfake [--addr ADDR] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]
                                run the conformance fake of a bank's registry gateway (docs/registry.md)
  rebill secrets rotate         seal payment tokens and webhook secrets under the current key
  rebill version                print the module version and VCS commit
  rebill audit [--from DATE] [--to DATE] [--json]
                                check every owed period against the gateways' captures

Run 'rebill serve --help' for the environment variables, and
'rebill COMMAND --help' for a command's flags.
`

// gatewaysHelp explains the gateways' configuration beyond the table.
const gatewaysHelp = `
Gateways outside dev mode: REBILL_GATEWAYS_FILE names a JSON or YAML list of
gateways; the name is what subscriptions give as payment_method.gateway.
Secrets are read from the environment variables that credentials names:

    - name: yookassa
      kind: yookassa                 # sim, stripe or yookassa
      priority: 1                    # lower wins among equally cheap gateways
      commission_bps: {RUB: 280, "*": 300}
      currencies: [RUB]
      hold_lifetime: 168h            # optional: the kind's default
      timeout: 15s                   # optional: REBILL_GATEWAY_TIMEOUT
      credentials: {shop_id: YOOKASSA_SHOP_ID, secret_key: YOOKASSA_SECRET_KEY}

A bad file stops the start with every fault of the file, one line each
naming the file, the entry and the field. For
simulators only, REBILL_GATEWAYS is a shorthand: name=URL pairs, comma
separated, the URL a simulator's root followed by /<gateway it hosts>:

    REBILL_GATEWAYS=sim1=http://127.0.0.1:8090/sim1,sim2=http://127.0.0.1:8090/sim2

At start each simulated gateway is probed once on URL/health: no answer, or
an answer other than 200 or 503 (a 404 means the URL names no gateway),
stops the start with an error naming the gateway; 503 (down) only logs a
warning. With no gateway configured, production mode starts but warns:
nothing can be charged.
`

// Run executes one rebill command. It returns when the command is done or
// ctx is cancelled (serve shuts down gracefully then). --help on a command
// prints its usage on stdout and returns nil without doing anything else.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[1] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		fs := newFlagSet("version", "Usage: rebill version\n\nPrints the module version, the VCS commit it was built from and the Go version.")
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		info, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(info, buildCommit))
		return nil
	case "registryfake":
		return registryfake(ctx, args[2:], stdout, stderr)
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	switch args[1] {
	case "serve":
		fs := newFlagSet("serve", "Usage: rebill serve\n\nMigrates the database, then serves HTTP and runs the billing workers until\nSIGINT or SIGTERM. Configuration comes from environment variables:\n")
		usage := fs.Usage
		fs.Usage = func() {
			usage()
			config.PrintHelp(fs.Output())
			fmt.Fprint(fs.Output(), gatewaysHelp)
		}
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		return serve(ctx, cfg, log, stdout)
	case "migrate":
		fs := newFlagSet("migrate", "Usage: rebill migrate\n\nApplies pending migrations (rebill's and River's) to DATABASE_URL, or to the\nprivate cluster when it is empty, and prints the status of each.")
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		return migrate(ctx, cfg, log, stdout)
	case "apikey":
		return apikey(ctx, cfg, log, args[2:], stdout, stderr)
	case "gatewaysim":
		return gatewaysim(ctx, cfg, log, args[2:], stdout, stderr)
	case "audit":
		return auditCommand(ctx, cfg, log, args[2:], stdout, stderr)
	case "secrets":
		return secretsCommand(ctx, cfg, log, args[2:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[1])
}

// newFlagSet returns a flag set whose usage is text followed by its flags,
// written to the set's output.
func newFlagSet(name, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), text)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses a command's arguments. -h or --help prints the usage on
// stdout and reports done with no error: the command must not run. A bad
// flag or a stray argument prints the usage on stderr and returns the error.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard) // flag would print the usage itself, on one writer for both cases
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return true, nil
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	if err != nil {
		fs.SetOutput(stderr)
		fs.Usage()
		return true, err
	}
	return false, nil
}

// buildCommit is the commit given at link time, for builds that Go does not
// stamp with VCS information (a worktree, whose .git is a file; a build
// context without .git):
//
//	go build -ldflags "-X github.com/rebill/rebill/app.buildCommit=$(git rev-parse HEAD)" ./cmd/rebill
var buildCommit string

// versionText describes the build: the main module's version (a tag, a
// pseudo-version with +dirty, or (devel)), the VCS commit and whether the
// tree had uncommitted changes, and the Go version. A commit set at link
// time (linked, from buildCommit) wins; binaries built without either (go run, go test,
// -buildvcs=false) say the commit is unknown.
func versionText(info *debug.BuildInfo, linked string) string {
	if info == nil {
		return "rebill: no build information in this binary\n"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	commit := settings["vcs.revision"]
	switch {
	case linked != "":
		commit = linked + " (set at link time)"
	case commit == "":
		commit = "unknown (built without VCS information, e.g. by go run; see docs/operating.md)"
	case settings["vcs.modified"] == "true":
		commit += " (modified: built with uncommitted changes)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rebill %s\n", version)
	if info.Main.Path != "" {
		fmt.Fprintf(&b, "module %s\n", info.Main.Path)
	}
	fmt.Fprintf(&b, "commit %s\n", commit)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "commit time %s\n", t)
	}
	fmt.Fprintf(&b, "go %s\n", info.GoVersion)
	return b.String()
}

func newLogger(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", "rebill").Logger()
}

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

func apikey(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey create", "Usage: rebill apikey create --role admin|support|customer [--customer ID]\n\n"+
		"Creates an API key and prints it once; only its hash is stored.")
	roleName := fs.String("role", "", "admin, support or customer (required)")
	customer := fs.String("customer", "", "customer_id the key is bound to (customer role only)")
	if len(args) == 0 || args[0] != "create" {
		// "rebill apikey --help" asks for this usage too.
		if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
			return err
		}
		fs.SetOutput(stderr)
		fs.Usage()
		return errors.New("apikey: want the subcommand create")
	}
	if done, err := parseFlags(fs, args[1:], stdout, stderr); done || err != nil {
		return err
	}
	if *roleName == "" {
		return errors.New("apikey create: --role is required (admin, support or customer)")
	}
	if _, err := apikeys.ParseRole(*roleName); err != nil {
		return err
	}
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	key, err := apikeys.NewStore(pool, "").CreateWithPool(ctx, *roleName, *customer)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "id:   %s\nrole: %s\nkey:  %s\n(the key is shown once; only its hash is stored)\n", key.ID, key.Role, key.Secret)
	return nil
}

func gatewaysim(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gatewaysim", "Usage: rebill gatewaysim [--addr ADDR]\n\n"+
		"Runs the simulated gateways sim1..sim5 standalone, their ledger in the gatewaysim\n"+
		"schema of DATABASE_URL, or, without it, of the private cluster in REBILL_DATA_DIR/pg,\n"+
		"which dev nodes started from the same folder share (the start line names it).\n"+
		"Gateway simN's URL for REBILL_GATEWAYS is http://ADDR/simN.\n"+
		"Operations are stamped with real time, or with REBILL_DEV=1 with the dev clock of\n"+
		"DATABASE_URL (rebill's migrated database, the one the dev nodes read).")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
		return err
	}
	if cfg.SimLedger == config.SimLedgerMemory {
		return errors.New("gatewaysim: REBILL_SIM_LEDGER=memory is for a single dev node's in-process simulators; rebill gatewaysim keeps its ledger in PostgreSQL: unset it")
	}
	pool, stop, err := openPool(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	var clk clock.Clock = clock.Wall{}
	if cfg.Dev {
		var manual *clock.Manual
		if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "read the dev clock", func() (err error) {
			manual, err = clock.NewManual(ctx, pool, time.Now())
			return err
		}); err != nil {
			return fmt.Errorf("gatewaysim: with REBILL_DEV=1 it follows the dev clock of DATABASE_URL, which must be rebill's migrated database: %w", err)
		}
		clk = manual
	}
	// ListenAndServe migrates the ledger too; doing it first here is what
	// waits out a database that is not there yet.
	if err := startup.Retry(ctx, log, cfg.StartupRetryFor, "prepare the simulated gateways' ledger", func() error {
		return sim.Migrate(ctx, pool)
	}); err != nil {
		return err
	}
	return sim.ListenAndServe(ctx, *addr, pool, clk, simNames, ledgerLogger(log, cfg, pool))
}

// ledgerLogger names, on every line of a standalone simulator and first on
// the one that says it listens, where its ledger lives: without
// DATABASE_URL it is the private cluster of REBILL_DATA_DIR, which the dev
// nodes started from the same folder share. The location is built from
// the parsed connection settings, so no password can reach the log.
func ledgerLogger(log zerolog.Logger, cfg config.Config, pool *pgxpool.Pool) zerolog.Logger {
	conn := pool.Config().ConnConfig
	where := fmt.Sprintf("schema gatewaysim of database %s on %s:%d, user %s", conn.Database, conn.Host, conn.Port, conn.User)
	ctx := log.With().Str("ledger", where)
	if cfg.DatabaseURL == "" {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pg"))
		if err != nil {
			dir = filepath.Join(cfg.DataDir, "pg")
		}
		ctx = ctx.Str("ledger_cluster", dir).Str("ledger_shared_with", "dev nodes whose REBILL_DATA_DIR is "+cfg.DataDir+" and no DATABASE_URL")
	}
	return ctx.Logger()
}

// simNames are dev mode's simulated gateways, cheapest first.
var simNames = []string{"sim1", "sim2", "sim3", "sim4", "sim5"}

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

// Main is cmd/rebill's whole body: signals cancel the context, and the exit
// code reports failure.
func Main() {
	ctx, cancel := signalContext()
	defer cancel()
	if err := Run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rebill:", err)
		cancel()
		os.Exit(1)
	}
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

// registryfake serves the conformance fake of a bank's or payment agent's
// registry gateway (charges/registry/testkit/agentfake, in memory), so
// that a production node can be tried without a bank: point an http entry of
// REBILL_REGISTRY_FILE at it. With --tls-cert and --tls-key it serves
// HTTPS, and with --client-ca it requires a client certificate that CA
// signed, as a bank does: the documented mutual TLS setup can be tried
// with rebill's own tools. It needs no database.
func registryfake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("registryfake", "Usage: rebill registryfake [--addr ADDR] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]\n\n"+
		"Serves, in memory, the conformance fake of the HTTP registry gateway that rebill's\n"+
		"kind http speaks to (docs/registry.md): POST /payments, GET /payments/{id},\n"+
		"POST /payments/{id}/annulment, GET /quittances/{uin}, GET /payments?date= (the export);\n"+
		"and, to drive it, GET /ledger, GET /faults, PUT /faults (replaces every switch),\n"+
		"PATCH /faults (changes the switches given), POST /outside {\"uin\", \"amount\"} (a payment\n"+
		"made at another bank). Its book is lost when it stops. With --tls-cert and --tls-key it\n"+
		"serves HTTPS; with --client-ca too it refuses a client without a certificate that CA signed.")
	addr := fs.String("addr", "127.0.0.1:8092", "listen address")
	certFile := fs.String("tls-cert", "", "the server certificate (PEM, chain after it): serve HTTPS")
	keyFile := fs.String("tls-key", "", "the server certificate's key (PEM)")
	clientCA := fs.String("client-ca", "", "the CA (PEM) that must sign a client's certificate: require one")
	if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
		return err
	}
	fake := agentfake.New()
	var tlsConfig *tls.Config
	if *certFile != "" || *keyFile != "" || *clientCA != "" {
		var err error
		if tlsConfig, err = (mtls.ServerFiles{CertFile: *certFile, KeyFile: *keyFile, ClientCAFile: *clientCA}).Config(); err != nil {
			return fmt.Errorf("registryfake: %w", err)
		}
		fake.RequireClientCert = *clientCA != ""
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("registryfake: listen on %s: %w", *addr, err)
	}
	log := newLogger(stderr, "info")
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig,
		// A refused handshake (no client certificate, another CA's) is
		// logged, so the operator trying a setup sees why.
		ErrorLog: stdlog.New(log, "", 0)}
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsConfig)
	}
	log.Info().Str("addr", ln.Addr().String()).Str("scheme", scheme).Bool("client_certificate_required", fake.RequireClientCert).
		Msg("registryfake listening")
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registryfake: %w", err)
	}
	return nil
}
