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

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/yookassa"
	"github.com/rebill/rebill/internal/clock"
	"github.com/rebill/rebill/internal/config"
)

// gatewayKind is how rebill builds the gateways of one kind.
type gatewayKind struct {
	// credentials are the names the kind's entries must give under
	// credentials, each naming the environment variable that holds it.
	credentials []string
	// needsBaseURL: the kind has no public endpoint of its own.
	needsBaseURL bool
	// holdLifetime is how long the kind's card holds last when the entry
	// does not say.
	holdLifetime time.Duration
	// build makes the adapter; timeout is the entry's call timeout (or
	// REBILL_GATEWAY_TIMEOUT), clk the service clock.
	build func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error)
}

// gatewayKinds is every kind a gateways file may name.
var gatewayKinds = map[string]gatewayKind{
	"sim": {
		needsBaseURL: true,
		holdLifetime: 7 * 24 * time.Hour,
		build: func(g config.Gateway, timeout time.Duration, _ clock.Clock) (gateway.Gateway, error) {
			return sim.NewClient(g.Name, g.BaseURL, sim.ClientOptions{Timeout: timeout}), nil
		},
	},
	// Visa merchant-initiated holds last about 4 days 18 hours at Stripe.
	"stripe": {
		credentials:  []string{"api_key"},
		holdLifetime: 114 * time.Hour,
		build: func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error) {
			gw, err := stripe.New(stripe.Config{Name: g.Name, BaseURL: g.BaseURL, APIKey: g.Secrets["api_key"],
				Timeout: timeout, Clock: clk})
			if err != nil {
				return nil, err
			}
			return gw, nil
		},
	},
	// YooKassa card holds last 7 days.
	"yookassa": {
		credentials:  []string{"shop_id", "secret_key"},
		holdLifetime: 7 * 24 * time.Hour,
		build: func(g config.Gateway, timeout time.Duration, clk clock.Clock) (gateway.Gateway, error) {
			gw, err := yookassa.New(yookassa.Config{Name: g.Name, BaseURL: g.BaseURL, ShopID: g.Secrets["shop_id"],
				SecretKey: g.Secrets["secret_key"], Timeout: timeout, Clock: clk})
			if err != nil {
				return nil, err
			}
			return gw, nil
		},
	},
}

// checkGatewayKinds refuses entries whose kind is unknown, that lack what
// their kind needs (a base URL, a credential) or give a credential the kind
// does not take, naming the entry and the field.
func checkGatewayKinds(gateways []config.Gateway) error {
	kinds := make([]string, 0, len(gatewayKinds))
	for k := range gatewayKinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var errs []error
	for _, g := range gateways {
		bad := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("gateway %q: %s: %s", g.Name, field, fmt.Sprintf(format, args...)))
		}
		kind, ok := gatewayKinds[g.Kind]
		if !ok {
			bad("kind", "%q is not one of %s", g.Kind, strings.Join(kinds, ", "))
			continue
		}
		if kind.needsBaseURL && g.BaseURL == "" {
			bad("base_url", "required for kind %s", g.Kind)
		}
		for _, name := range kind.credentials {
			if _, ok := g.Credentials[name]; !ok {
				bad("credentials."+name, "required for kind %s: the name of the environment variable that holds it", g.Kind)
			}
		}
		for name := range g.Credentials {
			if !slices.Contains(kind.credentials, name) {
				want := "none"
				if len(kind.credentials) > 0 {
					want = strings.Join(kind.credentials, ", ")
				}
				bad("credentials."+name, "kind %s takes no such credential (it takes %s)", g.Kind, want)
			}
		}
	}
	return errors.Join(errs...)
}

// buildGateways makes the adapters of every configured gateway, each with
// its settings: the entry's call timeout or REBILL_GATEWAY_TIMEOUT, the
// entry's hold lifetime or its kind's.
func buildGateways(gateways []config.Gateway, defaultTimeout time.Duration, clk clock.Clock) ([]charges.Configured, error) {
	out := make([]charges.Configured, 0, len(gateways))
	for _, g := range gateways {
		kind := gatewayKinds[g.Kind]
		timeout := cmp.Or(g.Timeout, defaultTimeout)
		adapter, err := kind.build(g, timeout, clk)
		if err != nil {
			return nil, fmt.Errorf("gateway %q: %w", g.Name, err)
		}
		out = append(out, charges.Configured{Gateway: adapter, Settings: charges.Settings{
			Kind: g.Kind, Priority: g.Priority, CommissionBPS: g.CommissionBPS, Currencies: g.Currencies,
			HoldLifetime: cmp.Or(g.HoldLifetime, kind.holdLifetime), Timeout: timeout,
		}})
	}
	return out, nil
}

// adapters are the gateways of configured.
func adapters(configured []charges.Configured) []gateway.Gateway {
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

// checkGateways checks every configured gateway's kind, then probes each
// simulated one once, all at the same time, on its health endpoint. A
// simulator that does not answer, or answers anything but 200 or 503 (a
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
	if err := checkGatewayKinds(cfg.Gateways); err != nil {
		// One line per fault, each naming where the entry was written.
		where := gatewaysSource(cfg)
		if cfg.GatewaysFile != "" {
			where += ": " + cfg.GatewaysFile
		}
		lines := strings.Split(err.Error(), "\n")
		for i, l := range lines {
			lines[i] = where + ": " + l
		}
		return errors.New(strings.Join(lines, "\n"))
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
