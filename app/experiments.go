package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/subscriptions"
)

// loadExperiments reads REBILL_EXPERIMENTS_FILE against the guard rails
// of this node's settings; nil when none is set. A gateway timeout fits
// when a charge job under it ends more than 5s before River would rescue
// it (the check newRiver makes of the default).
func loadExperiments(cfg config.Config, gateways []config.Gateway) (*experiments.Set, error) {
	if cfg.ExperimentsFile == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(cfg.ExperimentsFile)
	if err != nil {
		return nil, fmt.Errorf("REBILL_EXPERIMENTS_FILE: %w", err)
	}
	var names []string
	for _, g := range gateways {
		names = append(names, g.Name)
	}
	set, err := experiments.Parse(raw, experiments.Limits{
		DunningMax: cfg.DunningMax, MaxAttempts: experiments.DecisionSevenAttempts, Gateways: names,
		TimeoutFits: func(t time.Duration) error {
			if job := charges.JobTimeout(t); cfg.RescueAfter <= job+5*time.Second {
				return fmt.Errorf("a charge job under it may run %s, and REBILL_RESCUE_AFTER (%s) must exceed that by more than 5s", job, cfg.RescueAfter)
			}
			return nil
		}})
	if err != nil {
		return nil, config.PrefixLines("REBILL_EXPERIMENTS_FILE: ", err)
	}
	return set, nil
}

// experimentsReader reads exps' reports, pricing each paid charge at its
// gateway's commission as configured.
func experimentsReader(pool *pgxpool.Pool, exps *experiments.Set, gateways *fleet.Gateways, clk clock.Clock) *experiments.Reader {
	settings := map[string]fleet.Settings{}
	for _, g := range gateways.List() {
		settings[g.Name] = fleet.Settings{CommissionBPS: g.CommissionBPS, Currencies: g.Currencies}
	}
	return &experiments.Reader{Records: experimentRecords{pool: pool}, Set: exps, Clock: clk,
		Commission: func(gateway, currency string, amount int64) int64 {
			bps, ok := settings[gateway].Commission(currency)
			if !ok {
				return 0
			}
			return fleet.CommissionCost(amount, bps)
		}}
}

// experimentRecords reads an experiment's records through the owners of
// the tables they are in.
type experimentRecords struct{ pool *pgxpool.Pool }

func (r experimentRecords) Subscriptions(ctx context.Context, key string) ([]uuid.UUID, map[string]int64, error) {
	return subscriptions.InExperiment(ctx, r.pool, key)
}

func (r experimentRecords) Charges(ctx context.Context, key string, subs []uuid.UUID) ([]experiments.ChargeFigures, error) {
	return charges.ExperimentFigures(ctx, r.pool, key, subs)
}

func (r experimentRecords) Paid(ctx context.Context, key string, subs []uuid.UUID) ([]experiments.PaidCharges, error) {
	return charges.ExperimentPaid(ctx, r.pool, key, subs)
}
