package config

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rebill/rebill/platform/mtls"
)

// ZhkhParty is one reporting party to GIS ZhKH (the bank or payment agent
// that places housing payments' information there), as
// REBILL_ZHKH_PARTIES_FILE configures it.
type ZhkhParty struct {
	Name    string
	Kind    string // RegistrySim or RegistryHTTP: the registry file's kinds
	BaseURL string
	// Priority orders the entries, lower first; equals take turns.
	Priority int
	Timeout  time.Duration // zero: REBILL_GATEWAY_TIMEOUT
	// Credentials maps each credential to the name of the environment
	// variable that holds it; Secrets are their values.
	Credentials map[string]string
	Secrets     map[string]string
	TLSFiles    mtls.Files
	TLS         *tls.Config
}

type zhkhPartyEntry struct {
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	BaseURL     string            `json:"base_url"`
	Priority    *int              `json:"priority"`
	Timeout     string            `json:"timeout"`
	Credentials map[string]string `json:"credentials"`
	TLS         *mtls.Files       `json:"tls"`
}

var zhkhPartyFields = []string{"name", "kind", "base_url", "priority", "timeout", "credentials", "tls"}

// LoadZhkhPartiesFile reads REBILL_ZHKH_PARTIES_FILE: a JSON or YAML list
// of GIS ZhKH parties, read by the entry-list reader the registry file
// uses, its kinds meaning the same (http: a party over docs/registry.md's
// protocol, mTLS and a bearer token; sim: dev mode's simulated party).
// dev tells whether dev mode is on: the sim kind is refused outside it.
func LoadZhkhPartiesFile(path string, getenv func(string) string, dev bool) ([]ZhkhParty, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read GIS ZhKH parties file: %w", err)
	}
	parties, err := ParseZhkhParties(raw, getenv, dev)
	if err != nil {
		return nil, inFile(path, err)
	}
	return parties, nil
}

// ParseZhkhParties is LoadZhkhPartiesFile on the file's contents.
func ParseZhkhParties(raw []byte, getenv func(string) string, dev bool) ([]ZhkhParty, error) {
	return entryList[ZhkhParty]{file: "GIS ZhKH parties file", noun: "party", plural: "GIS ZhKH parties",
		parse: func(raw json.RawMessage) (ZhkhParty, string, []error) {
			p, errs := parseZhkhParty(raw, getenv, dev)
			return p, p.Name, errs
		}}.read(raw)
}

func decodeZhkhParty(raw json.RawMessage) (zhkhPartyEntry, []error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return zhkhPartyEntry{}, []error{fmt.Errorf("want an object of fields: %w", err)}
	}
	var e zhkhPartyEntry
	var errs []error
	targets := map[string]any{"name": &e.Name, "kind": &e.Kind, "base_url": &e.BaseURL, "priority": &e.Priority,
		"timeout": &e.Timeout, "credentials": &e.Credentials, "tls": &e.TLS}
	for _, name := range sortedKeys(fields) {
		if !slices.Contains(zhkhPartyFields, name) {
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

func parseZhkhParty(raw json.RawMessage, getenv func(string) string, dev bool) (ZhkhParty, []error) {
	e, errs := decodeZhkhParty(raw)
	p := ZhkhParty{Name: e.Name, Kind: e.Kind, BaseURL: e.BaseURL, Priority: 1, Credentials: e.Credentials}
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
			bad("kind", "sim is dev mode's simulated party, a ledger in rebill's own database: refused outside dev mode "+
				"(REBILL_DEV=1), where a housing payment reported there would never reach GIS ZhKH")
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
			bad("base_url", "required for kind http: the party's API root, e.g. https://gis-zhkh.bank.example/rebill/v1")
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
			p.Priority = *e.Priority
		}
	}
	var err error
	if p.Timeout, err = positiveDuration(e.Timeout); err != nil {
		bad("timeout", "%v", err)
	}
	p.Secrets = readSecrets(e.Credentials, getenv, bad)
	if e.TLS != nil && e.Kind != RegistrySim {
		p.TLSFiles = *e.TLS
		if !p.TLSFiles.Empty() {
			if p.TLS, err = p.TLSFiles.Config(); err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					bad("tls", "%s", line)
				}
			}
		}
	}
	return p, errs
}
