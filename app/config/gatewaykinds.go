package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// GatewayKind is what a gateways file's entry of one kind must give. The
// file is checked against it in the same pass as the fields, so that one
// start reports every fault; app builds each kind's client.
type GatewayKind struct {
	// Credentials are the names the kind's entries must give under
	// credentials, each naming the environment variable that holds it.
	Credentials []string
	// NeedsBaseURL: the kind has no public endpoint of its own.
	NeedsBaseURL bool
	// HoldLifetime is how long the kind's card holds last when the entry
	// does not say.
	HoldLifetime time.Duration
}

// GatewayKinds is every kind a gateways file may name.
var GatewayKinds = map[string]GatewayKind{
	"sim": {NeedsBaseURL: true, HoldLifetime: 7 * 24 * time.Hour},
	// Visa merchant-initiated holds last about 4 days 18 hours at Stripe.
	"stripe": {Credentials: []string{"api_key"}, HoldLifetime: 114 * time.Hour},
	// YooKassa card holds last 7 days.
	"yookassa": {Credentials: []string{"shop_id", "secret_key"}, HoldLifetime: 7 * 24 * time.Hour},
}

// GatewayKindNames are GatewayKinds' names in order.
func GatewayKindNames() []string { return sortedKeys(GatewayKinds) }

// checkKind returns the faults of an entry against its kind's rules: an
// unknown kind, a missing base URL or credential, a credential the kind
// does not take. An entry without a kind is already reported as such.
func checkKind(e gatewayEntry) []error {
	if e.Kind == "" {
		return nil
	}
	kind, ok := GatewayKinds[e.Kind]
	if !ok {
		return []error{fmt.Errorf("kind: %q is not one of %s", e.Kind, strings.Join(GatewayKindNames(), ", "))}
	}
	var errs []error
	if kind.NeedsBaseURL && e.BaseURL == "" {
		errs = append(errs, fmt.Errorf("base_url: required for kind %s", e.Kind))
	}
	for _, name := range kind.Credentials {
		if _, ok := e.Credentials[name]; !ok {
			errs = append(errs, fmt.Errorf("credentials.%s: required for kind %s: the name of the environment variable that holds it", name, e.Kind))
		}
	}
	takes := "none"
	if len(kind.Credentials) > 0 {
		takes = strings.Join(kind.Credentials, ", ")
	}
	for _, name := range sortedKeys(e.Credentials) {
		if !slices.Contains(kind.Credentials, name) {
			errs = append(errs, fmt.Errorf("credentials.%s: kind %s takes no such credential (it takes %s)", name, e.Kind, takes))
		}
	}
	return errs
}
