package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/yookassa"
	"github.com/rebill/rebill/platform/clock"
)

// gatewayBuilder makes the adapter of a gateway of one kind; timeout is
// the entry's call timeout (or REBILL_GATEWAY_TIMEOUT), clk the service
// clock. What each kind requires is checked with the file, in
// config.GatewayKinds.
type gatewayBuilder func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error)

// gatewayBuilders has a builder for every kind of config.GatewayKinds.
var gatewayBuilders = map[string]gatewayBuilder{
	"sim": func(g config.Gateway, timeout time.Duration, _ clock.Clock) (gateway.Gateway, error) {
		return sim.NewClient(g.Name, g.BaseURL, sim.ClientOptions{Timeout: timeout}), nil
	},
	"stripe": func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error) {
		gw, err := stripe.New(stripe.Config{Name: g.Name, BaseURL: g.BaseURL, APIKey: g.Secrets["api_key"],
			Timeout: timeout, Clock: clk})
		if err != nil {
			return nil, err
		}
		return gw, nil
	},
	"yookassa": func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error) {
		gw, err := yookassa.New(yookassa.Config{Name: g.Name, BaseURL: g.BaseURL, ShopID: g.Secrets["shop_id"],
			SecretKey: g.Secrets["secret_key"], Timeout: timeout, Clock: clk})
		if err != nil {
			return nil, err
		}
		return gw, nil
	},
}

// buildGateways makes the adapters of every configured gateway, each with
// its settings: the entry's call timeout or REBILL_GATEWAY_TIMEOUT, the
// entry's hold lifetime or its kind's. An adapter's own timeout is at
// least adapterFloor: the longest an experiment arm gives a call, which
// the pipeline's context then bounds call by call.
func buildGateways(gateways []config.Gateway, defaultTimeout, adapterFloor time.Duration, clk clock.Clock) ([]fleet.Configured, error) {
	out := make([]fleet.Configured, 0, len(gateways))
	for _, g := range gateways {
		kind, known := config.GatewayKinds[g.Kind]
		build, buildable := gatewayBuilders[g.Kind]
		if !known || !buildable {
			return nil, fmt.Errorf("gateway %q: kind: %q is not one of %s", g.Name, g.Kind, strings.Join(config.GatewayKindNames(), ", "))
		}
		timeout := cmp.Or(g.Timeout, defaultTimeout)
		adapter, err := build(g, max(timeout, adapterFloor), clk)
		if err != nil {
			return nil, fmt.Errorf("gateway %q: %w", g.Name, err)
		}
		out = append(out, fleet.Configured{Gateway: adapter, Settings: fleet.Settings{
			Kind: g.Kind, Priority: g.Priority, CommissionBPS: g.CommissionBPS, Currencies: g.Currencies,
			HoldLifetime: cmp.Or(g.HoldLifetime, kind.HoldLifetime), Timeout: timeout,
		}})
	}
	return out, nil
}

// adapters are the gateways of configured.
func adapters(configured []fleet.Configured) []gateway.Gateway {
	out := make([]gateway.Gateway, len(configured))
	for i, c := range configured {
		out[i] = c.Gateway
	}
	return out
}

// gatewaysSource names where the configured gateways came from, for errors.
func gatewaysSource(cfg config.Config) string {
	if cfg.GatewaysFile != "" {
		return "REBILL_GATEWAYS_FILE"
	}
	return "REBILL_GATEWAYS"
}

// checkGateways probes each simulated gateway once, all at the same
// time, on its health endpoint (the file's entries were checked when the
// configuration was loaded). A simulator that does not answer, or answers anything but 200 or 503 (a
// 404: the URL names no gateway), is a configuration error: the start
// fails, naming every such gateway. One that answers 503 is there but
// down: the node starts, logs it, and that gateway's charges wait on its
// circuit. Outside dev mode, no gateway at all is logged as a warning:
// nothing can be charged.
func checkGateways(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	if len(cfg.Gateways) == 0 {
		if !cfg.Dev {
			log.Warn().Msg("no gateway configured (REBILL_GATEWAYS_FILE and REBILL_GATEWAYS are empty): subscriptions cannot name a payment gateway and nothing is charged")
		}
		return nil
	}
	var sims []config.Gateway
	for _, g := range cfg.Gateways {
		if cfg.Dev && slices.Contains(simNames, g.Name) {
			return fmt.Errorf("%s: gateway %q: name: taken by dev mode's simulated gateway", gatewaysSource(cfg), g.Name)
		}
		if g.Kind == "sim" {
			sims = append(sims, g)
		}
	}
	errs := make([]error, len(sims))
	var wg sync.WaitGroup
	for i, g := range sims {
		wg.Go(func() {
			c := sim.NewClient(g.Name, g.BaseURL, sim.ClientOptions{Timeout: cmp.Or(g.Timeout, cfg.GatewayTimeout)})
			errs[i] = c.Health(ctx)
		})
	}
	wg.Wait()
	var bad []error
	for i, err := range errs {
		switch {
		case err == nil:
			log.Info().Str("gateway", sims[i].Name).Msg("gateway answers its health probe")
		case errors.Is(err, gateway.ErrUnavailable):
			log.Warn().Err(err).Str("gateway", sims[i].Name).Msg("gateway is down at start; its charges wait until it answers")
		default:
			bad = append(bad, err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %w", gatewaysSource(cfg), errors.Join(bad...))
	}
	return nil
}
