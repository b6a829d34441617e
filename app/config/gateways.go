package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rebill/rebill/platform/validate"
)

// Gateway is one payment gateway as configured: REBILL_GATEWAYS_FILE's
// entries, REBILL_GATEWAYS's shorthand, or dev mode's simulators. What a
// kind requires (credentials, a base URL) is in GatewayKinds.
type Gateway struct {
	Name     string
	Kind     string
	BaseURL  string
	Priority int // lower first among equally cheap gateways
	// CommissionBPS is the commission in basis points by currency; "*"
	// stands for every currency without its own entry.
	CommissionBPS map[string]int64
	// Currencies are the currencies the gateway takes; empty: any (the
	// REBILL_GATEWAYS shorthand and dev mode's simulators).
	Currencies   []string
	HoldLifetime time.Duration // zero: the kind's default
	Timeout      time.Duration // zero: REBILL_GATEWAY_TIMEOUT
	// Credentials maps each credential the kind needs to the name of the
	// environment variable that holds it, as written in the file.
	Credentials map[string]string
	// Secrets are the credentials' values, read from those variables.
	Secrets map[string]string
}

// commission returns the gateway's commission on currency in basis points;
// ok is false when the gateway does not take the currency.
func (g Gateway) commission(currency string) (bps int64, ok bool) {
	if len(g.Currencies) > 0 && !slices.Contains(g.Currencies, currency) {
		return 0, false
	}
	if bps, ok := g.CommissionBPS[currency]; ok {
		return bps, true
	}
	bps, ok = g.CommissionBPS["*"]
	return bps, ok
}

// gatewayEntry is an entry of the file as written. Pointers tell a field
// left out from a zero.
type gatewayEntry struct {
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	BaseURL       string            `json:"base_url"`
	Priority      *int              `json:"priority"`
	CommissionBPS map[string]int64  `json:"commission_bps"`
	Currencies    []string          `json:"currencies"`
	HoldLifetime  string            `json:"hold_lifetime"`
	Timeout       string            `json:"timeout"`
	Credentials   map[string]string `json:"credentials"`
}

// MaxCommissionBPS is 100 %: a larger commission is a typing error.
const MaxCommissionBPS = 10_000

// LoadGatewaysFile reads REBILL_GATEWAYS_FILE: a JSON or YAML list of
// gateways (YAML is converted to JSON first, so both obey the same field
// names and refuse the same unknown fields). Secrets come from the
// environment variables that credentials name, through getenv. The whole
// file is checked: the error has a line per fault, each naming the file,
// the entry (by its name, or its position when it has none) and the field.
func LoadGatewaysFile(path string, getenv func(string) string) ([]Gateway, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gateways file: %w", err)
	}
	gateways, err := ParseGateways(raw, getenv)
	if err != nil {
		return nil, inFile(path, err)
	}
	return gateways, nil
}

// inFile prefixes each of err's lines (one per error) with the file's
// path, so that every line of a long report says where it comes from.
func inFile(path string, err error) error { return PrefixLines(path+": ", err) }

// PrefixLines prefixes each of err's lines with prefix: a settings file names the setting on every line of its report.
func PrefixLines(prefix string, err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// ParseGateways is LoadGatewaysFile on the file's contents. It checks the
// whole file before it answers: the error has one line per fault, each
// naming the entry and the field, so that one start reports them all.
func ParseGateways(raw []byte, getenv func(string) string) ([]Gateway, error) {
	return entryList[Gateway]{file: "gateways file", noun: "gateway", plural: "gateways",
		parse: func(raw json.RawMessage) (Gateway, string, []error) {
			g, errs := parseEntry(raw, getenv)
			return g, g.Name, errs
		}}.read(raw)
}

// entryFields are the fields of an entry, as gatewayEntry names them.
var entryFields = map[string]bool{"name": true, "kind": true, "base_url": true, "priority": true, "commission_bps": true,
	"currencies": true, "hold_lifetime": true, "timeout": true, "credentials": true}

// decodeEntry decodes an entry field by field, so that a field of the
// wrong type or an unknown one is reported with the others rather than
// ending the check of the entry.
func decodeEntry(raw json.RawMessage) (gatewayEntry, []error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return gatewayEntry{}, []error{fmt.Errorf("want an object of fields: %w", err)}
	}
	var e gatewayEntry
	var errs []error
	targets := map[string]any{"name": &e.Name, "kind": &e.Kind, "base_url": &e.BaseURL, "priority": &e.Priority,
		"commission_bps": &e.CommissionBPS, "currencies": &e.Currencies, "hold_lifetime": &e.HoldLifetime,
		"timeout": &e.Timeout, "credentials": &e.Credentials}
	for _, name := range sortedKeys(fields) {
		if !entryFields[name] {
			errs = append(errs, fmt.Errorf("%s: unknown field", name))
			continue
		}
		if err := json.Unmarshal(fields[name], targets[name]); err != nil {
			errs = append(errs, fieldError(name, err))
		}
	}
	return e, errs
}

// parseEntry decodes and checks one entry, returning every fault found.
// The returned Gateway carries the name even on error, so that the
// messages can name the entry.
func parseEntry(raw json.RawMessage, getenv func(string) string) (Gateway, []error) {
	e, errs := decodeEntry(raw)
	g := Gateway{Name: e.Name, Kind: e.Kind, BaseURL: e.BaseURL, CommissionBPS: e.CommissionBPS,
		Currencies: e.Currencies, Credentials: e.Credentials}
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !validName(e.Name) {
		bad("name", "want 1..64 letters, digits, '-' or '_' (what subscriptions give as payment_method.gateway)")
	}
	if e.Kind == "" {
		bad("kind", "required")
	}
	errs = append(errs, checkKind(e)...)
	if e.BaseURL != "" {
		if u, err := url.Parse(e.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("base_url", "want an absolute http or https URL, got %q", e.BaseURL)
		}
	}
	switch {
	case e.Priority == nil:
		bad("priority", "required: an integer of at least 1 (lower is preferred among equally cheap gateways)")
	case *e.Priority < 1:
		bad("priority", "want an integer of at least 1, got %d", *e.Priority)
	default:
		g.Priority = *e.Priority
	}
	if len(e.Currencies) == 0 {
		bad("currencies", "required: the ISO 4217 codes the gateway takes, e.g. [\"RUB\"]")
	}
	for i, c := range e.Currencies {
		if _, ok := validate.Currency(c); !ok {
			bad(fmt.Sprintf("currencies[%d]", i), "%q is not an ISO 4217 currency code in upper case", c)
		} else if slices.Index(e.Currencies, c) != i {
			bad(fmt.Sprintf("currencies[%d]", i), "%q is listed twice", c)
		}
	}
	if len(e.CommissionBPS) == 0 {
		bad("commission_bps", "required: basis points by currency, \"*\" for the rest, e.g. {\"RUB\": 250}")
	}
	for _, c := range sortedKeys(e.CommissionBPS) {
		bps := e.CommissionBPS[c]
		switch {
		case c != "*" && !slices.Contains(e.Currencies, c):
			bad("commission_bps."+c, "not one of the gateway's currencies (or \"*\")")
		case bps < 0 || bps > MaxCommissionBPS:
			bad("commission_bps."+c, "want basis points between 0 and %d, got %d", MaxCommissionBPS, bps)
		}
	}
	for _, c := range e.Currencies {
		if _, ok := g.commission(c); !ok && len(e.CommissionBPS) > 0 {
			bad("commission_bps", "no commission for %s: give it one or a \"*\" entry", c)
		}
	}
	var err error
	if g.HoldLifetime, err = positiveDuration(e.HoldLifetime); err != nil {
		bad("hold_lifetime", "%v", err)
	}
	if g.Timeout, err = positiveDuration(e.Timeout); err != nil {
		bad("timeout", "%v", err)
	}
	g.Secrets = readSecrets(e.Credentials, getenv, bad)
	return g, errs
}

// readSecrets reads the value of each credential from the environment
// variable it names, reporting through bad a credential that names none or
// one that is not set. A value is never put in a message: only its
// variable's name.
func readSecrets(credentials map[string]string, getenv func(string) string, bad func(field, format string, args ...any)) map[string]string {
	secrets := map[string]string{}
	for _, name := range sortedKeys(credentials) {
		env := credentials[name]
		switch value := getenv(env); {
		case env == "":
			bad("credentials."+name, "want the name of the environment variable that holds it")
		case value == "":
			bad("credentials."+name, "environment variable %s is not set or empty", env)
		default:
			secrets[name] = value
		}
	}
	return secrets
}

// fieldError turns encoding/json's message about field into one that
// names it (and the key inside it, for a map or a list).
func fieldError(field string, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return fmt.Errorf("%s: want %s, got %s", field, typeErr.Type, typeErr.Value)
	}
	return fmt.Errorf("%s: %w", field, err)
}

// positiveDuration parses an optional Go duration ("96h", "10s"); empty is
// zero (the default applies).
func positiveDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a positive duration such as 96h or 10s, got %q", v)
	}
	return d, nil
}

func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// simShorthand turns REBILL_GATEWAYS's name=URL pairs into simulated
// gateways, in the order listed: priority by position, no commission, any
// currency.
func simShorthand(pairs [][2]string) []Gateway {
	out := make([]Gateway, len(pairs))
	for i, p := range pairs {
		out[i] = Gateway{Name: p[0], Kind: "sim", BaseURL: p[1], Priority: i + 1, CommissionBPS: map[string]int64{"*": 0}}
	}
	return out
}

// DevGateways are dev mode's simulated gateways sim1..sim5, at the OpenAPI document's
// commissions (1.5, 1.8, 2.0, 2.5, 3.0 %) and priorities, taking any
// currency, with a card hold that lasts 7 days as at YooKassa and T-Bank.
// Their URLs are known once the simulator runs.
func DevGateways(baseURL string) []Gateway {
	bps := []int64{150, 180, 200, 250, 300}
	out := make([]Gateway, len(bps))
	for i, b := range bps {
		name := fmt.Sprintf("sim%d", i+1)
		out[i] = Gateway{Name: name, Kind: "sim", BaseURL: baseURL + "/" + name, Priority: i + 1,
			CommissionBPS: map[string]int64{"*": b}, HoldLifetime: 7 * 24 * time.Hour}
	}
	return out
}
