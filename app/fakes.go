package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/mtls"
	"github.com/rebill/rebill/platform/startup"
	"github.com/rebill/rebill/zhkh/party/testkit/partyfake"
)

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

// zhkhfake serves the conformance fake of a GIS ZhKH reporting party
// (zhkh/party/testkit/partyfake, in memory), so that a production node can
// be tried without a bank: point an http entry of REBILL_ZHKH_PARTIES_FILE
// at it. With --tls-cert and --tls-key it serves HTTPS, and with
// --client-ca it requires a client certificate that CA signed. It needs no
// database.
func zhkhfake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("zhkhfake", "Usage: rebill zhkhfake [--addr ADDR] [--token TOKEN] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]\n\n"+
		"Serves, in memory, the conformance fake of the GIS ZhKH reporting party that rebill's\n"+
		"kind http speaks to (docs/registry.md): POST /reports, GET /reports/{id},\n"+
		"POST /reports/{id}/cancellation; and, to drive it, GET /ledger, GET /faults, PUT /faults\n"+
		"(replaces every switch: down, lose_answers, processing, refuse). Its ledger is lost when\n"+
		"it stops. With --tls-cert and --tls-key it serves HTTPS; with --client-ca too it refuses\n"+
		"a client without a certificate that CA signed.")
	addr := fs.String("addr", "127.0.0.1:8093", "listen address")
	token := fs.String("token", "", "the bearer token a request must carry; empty: none")
	certFile := fs.String("tls-cert", "", "the server certificate (PEM, chain after it): serve HTTPS")
	keyFile := fs.String("tls-key", "", "the server certificate's key (PEM)")
	clientCA := fs.String("client-ca", "", "the CA (PEM) that must sign a client's certificate: require one")
	if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
		return err
	}
	fake := partyfake.New()
	fake.BearerToken = *token
	var tlsConfig *tls.Config
	if *certFile != "" || *keyFile != "" || *clientCA != "" {
		var err error
		if tlsConfig, err = (mtls.ServerFiles{CertFile: *certFile, KeyFile: *keyFile, ClientCAFile: *clientCA}).Config(); err != nil {
			return fmt.Errorf("zhkhfake: %w", err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("zhkhfake: listen on %s: %w", *addr, err)
	}
	log := newLogger(stderr, "info")
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig, ErrorLog: stdlog.New(log, "", 0)}
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsConfig)
	}
	log.Info().Str("addr", ln.Addr().String()).Str("scheme", scheme).Bool("client_certificate_required", *clientCA != "").
		Msg("zhkhfake listening")
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("zhkhfake: %w", err)
	}
	return nil
}
