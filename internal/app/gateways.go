package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/internal/config"
)

// checkGateways probes each gateway of REBILL_GATEWAYS once, all at the
// same time, on its health endpoint. A gateway that does not answer, or
// answers anything but 200 or 503 (a 404: the URL names no gateway), is a
// configuration error: the start fails, naming every such gateway. One
// that answers 503 is there but down: the node starts, logs it, and that
// gateway's charges wait on its circuit. Outside dev mode, no gateway at
// all is logged as a warning: nothing can be charged.
func checkGateways(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	if len(cfg.Gateways) == 0 {
		if !cfg.Dev {
			log.Warn().Msg("no gateway configured (REBILL_GATEWAYS is empty): subscriptions cannot name a payment gateway and nothing is charged")
		}
		return nil
	}
	names := make([]string, 0, len(cfg.Gateways))
	for name := range cfg.Gateways {
		names = append(names, name)
	}
	slices.Sort(names)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			c := sim.NewClient(name, cfg.Gateways[name], sim.ClientOptions{Timeout: cfg.GatewayTimeout})
			errs[i] = c.Health(ctx)
		})
	}
	wg.Wait()
	var bad []error
	for i, err := range errs {
		switch {
		case err == nil:
			log.Info().Str("gateway", names[i]).Msg("gateway answers its health probe")
		case errors.Is(err, gateway.ErrUnavailable):
			log.Warn().Err(err).Str("gateway", names[i]).Msg("gateway is down at start; its charges wait until it answers")
		default:
			bad = append(bad, err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("REBILL_GATEWAYS: %w", errors.Join(bad...))
	}
	return nil
}
