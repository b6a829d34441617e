package config

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rebill/rebill/platform/mtls"
)

// Registry is one gateway to the state payment registry (GIS GMP), as
// REBILL_REGISTRY_FILE configures it.
type Registry struct {
	Name    string
	Kind    string // RegistrySim or RegistryHTTP
	BaseURL string
	// Priority orders the entries, lower first; equals take turns.
	Priority int
	Timeout  time.Duration // zero: REBILL_GATEWAY_TIMEOUT
	// Credentials maps each credential to the name of the environment
	// variable that holds it, as written in the file; Secrets are their
	// values.
	Credentials map[string]string
	Secrets     map[string]string
	// TLSFiles are the files named under tls; TLS is what they make, nil
	// when none is named (the system's trust store, no client certificate).
	TLSFiles  mtls.Files
	TLS       *tls.Config
	PaymentID RegistryPaymentID
}

// RegistryPaymentID is how an entry derives the registry's payment
// identifier of a posting (see charges/registry's PaymentIDs): every entry
// must say the same, since a posting's retry may go through any of them.
type RegistryPaymentID struct {
	Format string // PaymentIDHex or PaymentIDUIP
	BIK    string // uip only
	Branch string // uip only, optional
}

// The registry kinds.
const (
	// RegistrySim is dev mode's simulated registry: a book in rebill's own
	// database. Refused outside dev mode: a fine "posted" there would be
	// captured while the real registry never heard of its payment.
	RegistrySim = "sim"
	// RegistryHTTP is a bank or payment agent that posts to the registry
	// on rebill's behalf, over the protocol of docs/registry.md.
	RegistryHTTP = "http"
)

// The payment identifier formats (registry.PaymentIDHex, registry.PaymentIDUIP).
const (
	PaymentIDHex = "hex"
	PaymentIDUIP = "uip"
)

// RegistryBearerCredential is the http kind's one credential: a token sent
// as Authorization: Bearer, besides or instead of a client certificate.
const RegistryBearerCredential = "bearer_token"

type registryEntry struct {
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	BaseURL     string            `json:"base_url"`
	Priority    *int              `json:"priority"`
	Timeout     string            `json:"timeout"`
	Credentials map[string]string `json:"credentials"`
	TLS         *mtls.Files       `json:"tls"`
	PaymentID   *paymentIDEntry   `json:"payment_id"`
}

type paymentIDEntry struct {
	Format string `json:"format"`
	BIK    string `json:"bik"`
	Branch string `json:"branch"`
}

// LoadRegistriesFile reads REBILL_REGISTRY_FILE: a JSON or YAML list of
// registry gateways, read as the gateways file is (LoadGatewaysFile): the
// whole file is checked, one line per fault naming the file, the entry and
// the field, never a secret's value. dev tells whether dev mode is on: the
// sim kind is refused outside it.
func LoadRegistriesFile(path string, getenv func(string) string, dev bool) ([]Registry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read registry file: %w", err)
	}
	registries, err := ParseRegistries(raw, getenv, dev)
	if err != nil {
		return nil, inFile(path, err)
	}
	return registries, nil
}

// ParseRegistries is LoadRegistriesFile on the file's contents.
func ParseRegistries(raw []byte, getenv func(string) string, dev bool) ([]Registry, error) {
	var first *Registry // the first entry, whose payment_id the others must match
	firstWhere := ""
	return entryList[Registry]{file: "registry file", noun: "registry", plural: "registry gateways",
		parse: func(raw json.RawMessage) (Registry, string, []error) {
			r, errs := parseRegistryEntry(raw, getenv, dev)
			return r, r.Name, errs
		},
		across: func(r Registry, where string) []error {
			if first == nil {
				first, firstWhere = &r, where
				return nil
			}
			if r.PaymentID != first.PaymentID {
				return []error{fmt.Errorf("payment_id: %s differs from %s's %s: every entry must derive the same "+
					"identifiers, since a posting's retry may go through any of them", r.PaymentID, firstWhere, first.PaymentID)}
			}
			return nil
		}}.read(raw)
}

func (p RegistryPaymentID) String() string {
	s := "{format " + p.Format
	if p.BIK != "" {
		s += ", bik " + p.BIK
	}
	if p.Branch != "" {
		s += ", branch " + p.Branch
	}
	return s + "}"
}

var registryFields = []string{"name", "kind", "base_url", "priority", "timeout", "credentials", "tls", "payment_id"}

// decodeRegistryEntry decodes an entry field by field, as decodeEntry
// does, so that every bad field is reported; tls and payment_id refuse
// unknown fields of their own.
func decodeRegistryEntry(raw json.RawMessage) (registryEntry, []error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return registryEntry{}, []error{fmt.Errorf("want an object of fields: %w", err)}
	}
	var e registryEntry
	var errs []error
	targets := map[string]any{"name": &e.Name, "kind": &e.Kind, "base_url": &e.BaseURL, "priority": &e.Priority,
		"timeout": &e.Timeout, "credentials": &e.Credentials, "tls": &e.TLS, "payment_id": &e.PaymentID}
	for _, name := range sortedKeys(fields) {
		if !slices.Contains(registryFields, name) {
			errs = append(errs, fmt.Errorf("%s: unknown field", name))
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(fields[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(targets[name]); err != nil {
			errs = append(errs, fieldError(name, err))
		}
	}
	return e, errs
}

// parseRegistryEntry decodes and checks one entry, returning every fault.
// The returned Registry carries the name and payment_id even on error, so
// that messages can name the entry and compare it with the others.
func parseRegistryEntry(raw json.RawMessage, getenv func(string) string, dev bool) (Registry, []error) {
	e, errs := decodeRegistryEntry(raw)
	r := Registry{Name: e.Name, Kind: e.Kind, BaseURL: e.BaseURL, Priority: 1, Credentials: e.Credentials,
		PaymentID: RegistryPaymentID{Format: PaymentIDHex}}
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !validName(e.Name) {
		bad("name", "want 1..64 letters, digits, '-' or '_'")
	}
	switch e.Kind {
	case "":
		bad("kind", "required: %s or %s", RegistryHTTP, RegistrySim)
	case RegistrySim:
		if !dev {
			bad("kind", "sim is dev mode's simulated registry, a book in rebill's own database: refused outside dev mode "+
				"(REBILL_DEV=1), where a fine posted there would be captured with the real registry never told")
		}
		if e.BaseURL != "" {
			bad("base_url", "kind sim takes none")
		}
		if len(e.Credentials) > 0 {
			bad("credentials", "kind sim takes none")
		}
		if e.TLS != nil {
			bad("tls", "kind sim takes none")
		}
	case RegistryHTTP:
		if e.BaseURL == "" {
			bad("base_url", "required for kind http: the party's API root, e.g. https://gisgmp.bank.example/rebill/v1")
		} else if err := checkRegistryURL(e.BaseURL); err != nil {
			bad("base_url", "%v", err)
		}
		for _, name := range sortedKeys(e.Credentials) {
			if name != RegistryBearerCredential {
				bad("credentials."+name, "kind http takes no such credential (it takes %s)", RegistryBearerCredential)
			}
		}
	default:
		bad("kind", "%q is not one of %s, %s", e.Kind, RegistryHTTP, RegistrySim)
	}
	if e.Priority != nil {
		if *e.Priority < 1 {
			bad("priority", "want an integer of at least 1, got %d", *e.Priority)
		} else {
			r.Priority = *e.Priority
		}
	}
	var err error
	if r.Timeout, err = positiveDuration(e.Timeout); err != nil {
		bad("timeout", "%v", err)
	}
	r.Secrets = readSecrets(e.Credentials, getenv, bad)
	if e.TLS != nil && e.Kind != RegistrySim {
		r.TLSFiles = *e.TLS
		if !r.TLSFiles.Empty() {
			if r.TLS, err = r.TLSFiles.Config(); err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					bad("tls", "%s", line)
				}
			}
		}
	}
	if e.PaymentID != nil {
		r.PaymentID = RegistryPaymentID{Format: e.PaymentID.Format, BIK: e.PaymentID.BIK, Branch: e.PaymentID.Branch}
		if r.PaymentID.Format == "" {
			r.PaymentID.Format = PaymentIDHex
		}
		errs = append(errs, checkPaymentID(r.PaymentID)...)
	}
	return r, errs
}

// checkPaymentID returns the faults of a payment_id setting.
func checkPaymentID(p RegistryPaymentID) []error {
	var errs []error
	switch p.Format {
	case PaymentIDHex:
		if p.BIK != "" || p.Branch != "" {
			errs = append(errs, errors.New("payment_id: format hex takes no bik or branch"))
		}
	case PaymentIDUIP:
		if len(p.BIK) != 9 || !allDigits(p.BIK) {
			errs = append(errs, errors.New("payment_id.bik: required for format uip: the 9-digit BIK of the credit institution that accepts the payments"))
		}
		if p.Branch != "" && (len(p.Branch) > 6 || !allDigits(p.Branch)) {
			errs = append(errs, fmt.Errorf("payment_id.branch: want up to 6 digits (the institution's branch number), got %q", p.Branch))
		}
	default:
		errs = append(errs, fmt.Errorf("payment_id.format: %q is not one of %s, %s", p.Format, PaymentIDHex, PaymentIDUIP))
	}
	return errs
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// checkRegistryURL wants https, or plain http to a loopback address only
// (a fake or a local proxy): payments and credentials do not cross a
// network in the clear.
func checkRegistryURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("want an absolute https URL, got %q", raw)
	}
	if u.Scheme == "http" {
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("want https (plain http only to a loopback address), got %q", raw)
		}
	}
	return nil
}
