package config

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/rebill/rebill/platform/mtls"
)

// BillSource is one production bill source as REBILL_BILL_SOURCES_FILE
// configures it: where rebill pulls one kind's bills from. Defaults are
// applied, so every field is usable as is.
type BillSource struct {
	// Name identifies the source's sequence: its cursor, metrics and logs
	// are kept under it, so a new system needs a new name.
	Name    string
	Kind    string // "http"
	Bills   string // "housing" or "fines"
	BaseURL string
	// TokenEnv names the variable holding the bearer token ("": none);
	// Token is its value.
	TokenEnv string
	Token    string
	TLSFiles mtls.Files
	// TLS is TLSFiles read: nil when no file is named.
	TLS          *tls.Config
	Timeout      time.Duration // of one request
	BatchSize    int           // accounts per request, and bills per answer
	RateLimit    float64       // requests per second
	RereadWindow time.Duration // each pull re-reads what was published this far back
	SilentAfter  time.Duration // without a successful pull this long, the alert fires
}

// Defaults and bounds of a bill source's settings.
const (
	DefaultBillSourceTimeout      = 30 * time.Second
	DefaultBillSourceBatchSize    = 200
	MinBillSourceBatchSize        = 2 // a fines enrollment may name an STS and a licence
	MaxBillSourceBatchSize        = 1000
	DefaultBillSourceRateLimit    = 5.0
	MaxBillSourceRateLimit        = 1000.0
	DefaultBillSourceRereadWindow = 7 * 24 * time.Hour
	DefaultBillSourceSilentAfter  = 30 * time.Minute
	// MinBillSourceSilentAfter leaves room for two pulls (one a minute)
	// and their retries before a source counts as silent.
	MinBillSourceSilentAfter = 2 * time.Minute
)

// billSourceFields are the fields of an entry as written.
var billSourceFields = map[string]bool{"name": true, "kind": true, "bills": true, "base_url": true, "credentials": true,
	"tls": true, "timeout": true, "batch_size": true, "rate_limit": true, "reread_window": true, "silent_after": true}

// billSourceEntry is an entry of the file as written. Pointers tell a
// field left out from a zero.
type billSourceEntry struct {
	Name         string
	Kind         string
	Bills        string
	BaseURL      string
	Credentials  map[string]string
	TLS          *mtls.Files
	Timeout      string
	BatchSize    *int
	RateLimit    *float64
	RereadWindow string
	SilentAfter  string
}

// LoadBillSourcesFile reads REBILL_BILL_SOURCES_FILE: a JSON or YAML list
// of bill sources, at most one per kind of bill. The bearer token comes
// from the environment variable credentials.token names, through getenv.
// Like the gateways file, the whole file is checked: the error has a line
// per fault, each naming the file, the entry and the field, never a
// secret's value.
func LoadBillSourcesFile(path string, getenv func(string) string) ([]BillSource, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bill sources file: %w", err)
	}
	sources, err := ParseBillSources(raw, getenv)
	if err != nil {
		return nil, inFile(path, err)
	}
	return sources, nil
}

// ParseBillSources is LoadBillSourcesFile on the file's contents.
func ParseBillSources(raw []byte, getenv func(string) string) ([]BillSource, error) {
	bills := map[string]string{} // the kind of bill of each source read so far
	return entryList[BillSource]{file: "bill sources file", noun: "bill source", plural: "bill sources",
		parse: func(raw json.RawMessage) (BillSource, string, []error) {
			s, errs := parseBillSource(raw, getenv)
			return s, s.Name, errs
		},
		across: func(s BillSource, where string) []error {
			if other, taken := bills[s.Bills]; taken && s.Bills != "" {
				return []error{fmt.Errorf("bills: %s bills already come from bill source %s (at most one source per kind of bill)",
					s.Bills, other)}
			}
			if s.Bills != "" {
				bills[s.Bills] = where[len("bill source "):]
			}
			return nil
		}}.read(raw)
}

// decodeBillSource decodes an entry field by field, so that every bad
// field is reported.
func decodeBillSource(raw json.RawMessage) (billSourceEntry, []error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return billSourceEntry{}, []error{fmt.Errorf("want an object of fields: %w", err)}
	}
	var e billSourceEntry
	var errs []error
	targets := map[string]any{"name": &e.Name, "kind": &e.Kind, "bills": &e.Bills, "base_url": &e.BaseURL,
		"credentials": &e.Credentials, "tls": &e.TLS, "timeout": &e.Timeout, "batch_size": &e.BatchSize,
		"rate_limit": &e.RateLimit, "reread_window": &e.RereadWindow, "silent_after": &e.SilentAfter}
	for _, name := range sortedKeys(fields) {
		if !billSourceFields[name] {
			errs = append(errs, fmt.Errorf("%s: unknown field", name))
			continue
		}
		if name == "tls" {
			errs = append(errs, decodeTLS(fields[name], &e.TLS)...)
			continue
		}
		if err := json.Unmarshal(fields[name], targets[name]); err != nil {
			errs = append(errs, fieldError(name, err))
		}
	}
	return e, errs
}

// decodeTLS decodes the tls object, refusing unknown fields: a misspelt
// file name must not silently leave the client certificate out.
func decodeTLS(raw json.RawMessage, into **mtls.Files) []error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f mtls.Files
	if err := dec.Decode(&f); err != nil {
		return []error{fmt.Errorf("tls: want {client_cert_file, client_key_file, ca_file}: %w", err)}
	}
	*into = &f
	return nil
}

// parseBillSource decodes and checks one entry, returning every fault
// found; the BillSource carries the name and bills even on error, so that
// messages can name the entry.
func parseBillSource(raw json.RawMessage, getenv func(string) string) (BillSource, []error) {
	e, errs := decodeBillSource(raw)
	s := BillSource{Name: e.Name, Kind: e.Kind, BaseURL: e.BaseURL, Timeout: DefaultBillSourceTimeout,
		BatchSize: DefaultBillSourceBatchSize, RateLimit: DefaultBillSourceRateLimit,
		RereadWindow: DefaultBillSourceRereadWindow, SilentAfter: DefaultBillSourceSilentAfter}
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !validName(e.Name) {
		bad("name", "want 1..64 letters, digits, '-' or '_' (the source's metrics label and cursor)")
	}
	switch e.Kind {
	case "":
		bad("kind", `required: "http"`)
	case "http":
	default:
		bad("kind", `want "http", got %q`, e.Kind)
	}
	switch e.Bills {
	case "":
		bad("bills", `required: "housing" or "fines"`)
	case "housing", "fines":
		s.Bills = e.Bills
	default:
		bad("bills", `want "housing" or "fines", got %q`, e.Bills)
	}
	u, err := url.Parse(e.BaseURL)
	switch {
	case e.BaseURL == "":
		bad("base_url", "required: the source's absolute http or https URL")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
		// The URL is not quoted: it might carry a password.
		bad("base_url", "want an absolute http or https URL without user information")
	}
	for _, name := range sortedKeys(e.Credentials) {
		env := e.Credentials[name]
		switch value := getenv(env); {
		case name != "token":
			bad("credentials."+name, `unknown credential (only "token", a bearer token)`)
		case env == "":
			bad("credentials.token", "want the name of the environment variable that holds it")
		case value == "":
			bad("credentials.token", "environment variable %s is not set or empty", env)
		default:
			s.TokenEnv, s.Token = env, value
		}
	}
	if e.TLS != nil && !e.TLS.Empty() {
		s.TLSFiles = *e.TLS
		if err == nil && u.Scheme != "https" {
			bad("tls", "needs an https base_url")
		}
		if s.TLS, err = e.TLS.Config(); err != nil {
			for _, one := range splitJoined(err) {
				bad("tls", "%v", one)
			}
		}
	}
	if d, err := positiveDuration(e.Timeout); err != nil {
		bad("timeout", "%v", err)
	} else if d > 0 {
		s.Timeout = d
	}
	if e.BatchSize != nil {
		if *e.BatchSize < MinBillSourceBatchSize || *e.BatchSize > MaxBillSourceBatchSize {
			bad("batch_size", "want an integer from %d to %d, got %d", MinBillSourceBatchSize, MaxBillSourceBatchSize, *e.BatchSize)
		} else {
			s.BatchSize = *e.BatchSize
		}
	}
	if e.RateLimit != nil {
		if *e.RateLimit <= 0 || *e.RateLimit > MaxBillSourceRateLimit {
			bad("rate_limit", "want requests per second above 0 and at most %g, got %s", MaxBillSourceRateLimit,
				strconv.FormatFloat(*e.RateLimit, 'g', -1, 64))
		} else {
			s.RateLimit = *e.RateLimit
		}
	}
	if e.RereadWindow != "" {
		d, err := time.ParseDuration(e.RereadWindow)
		if e.RereadWindow == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			bad("reread_window", `want a duration of at least 0 such as 168h (0: no re-read), got %q`, e.RereadWindow)
		} else {
			s.RereadWindow = d
		}
	}
	if d, err := positiveDuration(e.SilentAfter); err != nil {
		bad("silent_after", "%v", err)
	} else if d > 0 && d < MinBillSourceSilentAfter {
		bad("silent_after", "want at least %s (the pull runs every minute), got %q", MinBillSourceSilentAfter, e.SilentAfter)
	} else if d > 0 {
		s.SilentAfter = d
	}
	return s, errs
}

// splitJoined returns the errors an errors.Join made, or err alone.
func splitJoined(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}
