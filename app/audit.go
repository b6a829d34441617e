package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/audit"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/registry"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pg"
)

// errDiscrepancies makes `rebill audit` exit 1 once the report is printed.
var errDiscrepancies = errors.New("audit found discrepancies")

// errAuditNoGateways refuses an audit that has no gateway to compare with.
var errAuditNoGateways = errors.New("audit: no gateway configured, so there are no gateway books to check: " +
	"set REBILL_GATEWAYS_FILE (or REBILL_GATEWAYS for simulators) as for rebill serve, or REBILL_DEV=1 for the simulated gateways")

// auditGrace is how long a due period may wait for its charge before the
// audit calls it not charged: a few scans, a clock move being scanned.
const auditGrace = time.Hour

// auditSettleDays are searched past the range for captures of its periods:
// dunning retries for a week after a period begins.
const auditSettleDays = 8

func auditCommand(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", "Usage: rebill audit [--from DATE] [--to DATE] [--json]\n\n"+
		"Checks that every period owed from --from to --to (UTC days, inclusive; default the last 30\n"+
		"days of the service clock) has at most one capture at the gateways, and one unless it\n"+
		"failed for good or waits in review, and that every capture belongs to exactly one period;\n"+
		"judges the autopay bills received in the range by the bill rules (docs/AUDIT.md).\n"+
		"Prints the counts; exits 1 listing every discrepancy. Reads the gateways of\n"+
		"REBILL_GATEWAYS_FILE (or REBILL_GATEWAYS; in dev mode the simulated ones) and refuses\n"+
		"to run without any; reads the registry's book through REBILL_REGISTRY_FILE's gateways\n"+
		"(in dev mode the simulated registry) when one is configured. Reads REBILL_REPLICA_URL when set.")
	fromFlag := fs.String("from", "", "first day, YYYY-MM-DD")
	toFlag := fs.String("to", "", "last day, YYYY-MM-DD")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
		return err
	}
	parse := func(name, v string) (time.Time, error) {
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return time.Time{}, fmt.Errorf("audit: --%s %q: want a day as YYYY-MM-DD", name, v)
		}
		return t, nil
	}
	var from, to time.Time
	var err error
	if *fromFlag != "" {
		if from, err = parse("from", *fromFlag); err != nil {
			return err
		}
	}
	if *toFlag != "" {
		if to, err = parse("to", *toFlag); err != nil {
			return err
		}
	}

	if cfg.SimLedger == config.SimLedgerMemory {
		// The dev node's captures are in its own memory: read from here,
		// every one of them would be reported missing at the gateway.
		return errors.New("audit: REBILL_SIM_LEDGER=memory keeps the simulated gateways' ledger in the dev node's memory, which another process cannot read: unset it")
	}
	if !cfg.Dev && len(cfg.Gateways) == 0 {
		// With no gateway's books to read every capture would be reported
		// missing at the gateway: an alarm about the configuration, not
		// about the money.
		return errAuditNoGateways
	}
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	var clk clock.Clock = clock.Wall{}
	configs := slices.Clone(cfg.Gateways)
	if cfg.Dev {
		manual, err := clock.NewManual(ctx, pool, time.Now())
		if err != nil {
			return err
		}
		clk = manual
		baseURL, stopSim, err := sim.StartOnClock(ctx, pool, manual, simNames, log.Level(zerolog.WarnLevel))
		if err != nil {
			return err
		}
		defer func() { _ = stopSim(context.Background()) }()
		configs = append(config.DevGateways(baseURL), configs...)
	}
	now := clk.Now()
	built, err := buildGateways(configs, cfg.GatewayTimeout, 0, clk)
	if err != nil {
		return err
	}
	gateways := adapters(built)
	registries, err := auditRegistries(cfg, pool, clk, log)
	if err != nil {
		return err
	}
	if to.IsZero() {
		to = now.Truncate(24 * time.Hour)
	}
	if from.IsZero() {
		from = to.AddDate(0, 0, -29)
	}
	if to.Before(from) {
		return fmt.Errorf("audit: --from %s is after --to %s", from.Format(time.DateOnly), to.Format(time.DateOnly))
	}
	read := pg.DBTX(pool)
	if cfg.ReplicaURL != "" {
		replica, err := openReplica(ctx, cfg.ReplicaURL)
		if err != nil {
			return err
		}
		defer replica.Close()
		read = replica
	}
	a := &audit.Auditor{DB: read, Gateways: gateways, SettleDays: auditSettleDays,
		Sources: []audit.Source{audit.Periods{DB: read, Now: now, Grace: auditGrace}},
		// The simulated gateways stamp the dev clock; real ones their own.
		Bills: &audit.Bills{Now: now, AnnulWithin: registryAnnulWithin, OpsOnServiceClock: cfg.Dev && len(cfg.Gateways) == 0,
			Registries: registries}}
	report, err := a.Run(ctx, from, to.AddDate(0, 0, 1))
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	} else {
		printAudit(stdout, report)
	}
	if n := len(report.Discrepancies); n > 0 {
		return fmt.Errorf("%w: %d", errDiscrepancies, n)
	}
	return nil
}

// auditRegistries are the registry gateways whose book the audit reads,
// as serve reaches them: REBILL_REGISTRY_FILE's entries, else in dev mode
// the simulated registry on clk; none without a registry.
func auditRegistries(cfg config.Config, pool *pgxpool.Pool, clk clock.Clock, log zerolog.Logger) ([]registry.Gateway, error) {
	switch {
	case len(cfg.Registries) > 0:
		gateways, _, err := registryGateways(cfg.Registries, pool, clk, log)
		return gateways, err
	case cfg.Dev:
		return registrysim.Sim{Pool: pool, Clock: clk, Accruals: simAccruals(pool)}.Gateways(), nil
	}
	return nil, nil
}

func printAudit(w io.Writer, r audit.Report) {
	fmt.Fprintf(w, "rebill audit from %s to %s (periods that began on those days, UTC)\n", r.From, r.To)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, line := range []struct {
		name string
		n    int
	}{{"periods", r.Periods}, {"captured", r.Captured}, {"failed", r.Failed}, {"in_review", r.InReview},
		{"not_owed", r.NotOwed}, {"open", r.Open}, {"gateway_captures", r.GatewayCaptures},
		{"refunds", r.Refunds}, {"gateway_refunds", r.GatewayRefunds}, {"bills", r.Bills}, {"discrepancies", len(r.Discrepancies)}} {
		fmt.Fprintf(tw, "%s\t%d\n", line.name, line.n)
	}
	_ = tw.Flush()
	for _, d := range r.Discrepancies {
		fmt.Fprintln(w, d.String())
	}
}
