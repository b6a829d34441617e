package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/api"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/zhkh"
	"github.com/rebill/rebill/zhkh/party"
	"github.com/rebill/rebill/zhkh/party/partyapi"
	zhkhsim "github.com/rebill/rebill/zhkh/party/sim"
)

// buildZhkh is the reporter of captured housing payments to GIS ZhKH,
// balanced over REBILL_ZHKH_PARTIES_FILE's parties; without the file, in
// dev mode through the simulated party zhkh1, and nil outside it (housing
// payments are then captured and not reported: warned at start). The
// simulated party is returned too when a party is simulated, for dev
// mode's endpoints.
func buildZhkh(cfg config.Config, pool *pgxpool.Pool, clk clock.Clock, jobs *river.Client[pgx.Tx], log zerolog.Logger) (*zhkh.Reporter, *zhkhsim.Sim, error) {
	var parties []party.Party
	var sim *zhkhsim.Sim
	switch {
	case len(cfg.ZhkhParties) > 0:
		var simNames []string
		for _, e := range cfg.ZhkhParties {
			if e.Kind == config.RegistrySim {
				simNames = append(simNames, e.Name)
			}
		}
		if len(simNames) > 0 {
			sim = &zhkhsim.Sim{Pool: pool, Clock: clk, Names: simNames}
		}
		sims := map[string]party.Party{}
		for _, p := range (zhkhsim.Sim{Pool: pool, Clock: clk, Names: simNames}).Parties() {
			sims[p.Name()] = p
		}
		for _, e := range cfg.ZhkhParties {
			var p party.Party
			switch e.Kind {
			case config.RegistrySim:
				p = sims[e.Name]
			case config.RegistryHTTP:
				client, err := partyapi.New(partyapi.Options{Name: e.Name, BaseURL: e.BaseURL, TLS: e.TLS,
					BearerToken: e.Secrets[config.RegistryBearerCredential]})
				if err != nil {
					return nil, nil, err
				}
				p = client
			default:
				return nil, nil, fmt.Errorf("GIS ZhKH party %s: kind %q has no adapter", e.Name, e.Kind)
			}
			parties = append(parties, party.WithSettings(p, party.Settings{Priority: e.Priority, Timeout: e.Timeout}))
		}
	case cfg.Dev:
		sim = &zhkhsim.Sim{Pool: pool, Clock: clk}
		parties = sim.Parties()
	default:
		log.Warn().Msg("no GIS ZhKH party is configured (REBILL_ZHKH_PARTIES_FILE): housing payments are captured " +
			"but not reported to GIS ZhKH, as 209-FZ requires of whoever accepts them")
		return nil, nil, nil
	}
	return &zhkh.Reporter{Pool: pool, Parties: party.NewBalancer(parties, cfg.GatewayTimeout), Clock: clk, Queue: jobs,
		RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax, Logger: log.With().Str("component", "zhkh").Logger()}, sim, nil
}

// devZhkh is the simulated GIS ZhKH party as dev mode's endpoints reach
// it: its ledger with the charge each of rebill's reports is of.
type devZhkh struct {
	*zhkhsim.Sim
}

// Ledger lists the simulated ledger, each report named by its charge.
func (d devZhkh) Ledger(ctx context.Context) ([]api.ZhkhLedgerEntry, error) {
	entries, err := d.Sim.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ReportID
	}
	charges, err := zhkh.ChargesOf(ctx, d.Pool, ids)
	if err != nil {
		return nil, err
	}
	out := make([]api.ZhkhLedgerEntry, len(entries))
	for i, e := range entries {
		out[i] = api.ZhkhLedgerEntry{LedgerEntry: e}
		if c, ok := charges[e.ReportID]; ok {
			out[i].ChargeID = c.String()
		}
	}
	return out, nil
}

// newDevZhkh is nil without a simulated party.
func newDevZhkh(sim *zhkhsim.Sim) api.DevZhkh {
	if sim == nil {
		return nil
	}
	return devZhkh{Sim: sim}
}

// reportedRefunds is the charges' event sink with the GIS ZhKH reports
// told of every succeeded refund, in its transaction: a refunded housing
// payment's report is annulled.
type reportedRefunds struct {
	*notify.Recorder
	reports *zhkh.Reporter
}

// RefundChanged records the refund's event and hands a succeeded refund
// to the reports.
func (r reportedRefunds) RefundChanged(ctx context.Context, tx pgx.Tx, eventType string, rf charges.Refund, at time.Time) error {
	if err := r.Recorder.RefundChanged(ctx, tx, eventType, rf, at); err != nil {
		return err
	}
	if eventType != charges.EventRefundSucceeded {
		return nil
	}
	return r.reports.Refunded(ctx, tx, rf.ChargeID, rf.Amount, at)
}

// chargeEvents is where the charges publish: the recorder, and the GIS
// ZhKH reports when housing payments are reported.
func chargeEvents(recorder *notify.Recorder, reports *zhkh.Reporter) charges.EventSink {
	if reports == nil {
		return recorder
	}
	return reportedRefunds{Recorder: recorder, reports: reports}
}

// registerZhkh adds the reports' workers and their sweep (as often as the
// scans), when housing payments are reported.
func registerZhkh(workers *river.Workers, reports *zhkh.Reporter, cfg config.Config) []*river.PeriodicJob {
	if reports == nil {
		return nil
	}
	zhkh.Register(workers, reports)
	if cfg.ScanInterval <= 0 {
		return nil
	}
	return []*river.PeriodicJob{zhkh.SweepJob(cfg.ScanInterval)}
}

// zhkhAPI is the reports as the API reads them: none without reports.
func zhkhAPI(reports *zhkh.Reporter) api.ZhkhReports {
	if reports == nil {
		return nil
	}
	return reports
}
