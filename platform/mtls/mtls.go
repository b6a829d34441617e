// Package mtls builds the TLS client settings of a party that
// authenticates rebill by a client certificate (mutual TLS), as banks and
// payment agents do: the certificate and key, and the certificate
// authority that signs the party's own certificate when it is not one the
// system trusts, are read from files named in the configuration.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the files of a client's TLS settings. All empty: the
// system's trust store and no client certificate.
type Files struct {
	// CertFile and KeyFile are the client certificate (PEM, its chain
	// after it) and its private key (PEM); both or neither.
	CertFile string `json:"client_cert_file"`
	KeyFile  string `json:"client_key_file"`
	// CAFile holds the PEM certificates that may sign the party's server
	// certificate, instead of the system's trust store.
	CAFile string `json:"ca_file"`
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f == Files{} }

// Config reads the files and returns the client settings (TLS 1.2 at
// least). Errors name the field and the file, never its contents: a key
// file's bytes are a secret.
func (f Files) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		errs = append(errs, errors.New("client_cert_file and client_key_file: give both or neither"))
	case f.CertFile != "":
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("client_cert_file %q and client_key_file %q: not a PEM certificate and its matching key: %w",
				f.CertFile, f.KeyFile, redact(err)))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ca_file %q: %w", f.CAFile, err))
		case !pool.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("ca_file %q: holds no PEM certificate", f.CAFile))
		default:
			cfg.RootCAs = pool
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// redact keeps an error about a key pair from carrying the key: the
// standard library's messages name the problem, not the bytes, but an
// os error is passed on as its operation and path only.
func redact(err error) error {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return fmt.Errorf("%s %s: %w", pathErr.Op, pathErr.Path, pathErr.Err)
	}
	return errors.New(firstLine(err.Error()))
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// ServerFiles names the files of a server's TLS settings, for the fakes
// an operator runs to try a client-certificate setup (rebill
// registryfake).
type ServerFiles struct {
	// CertFile and KeyFile are the server's certificate (PEM, its chain
	// after it) and key; both required.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the PEM certificates that must sign a
	// client's certificate: a client without one so signed is refused in
	// the handshake.
	ClientCAFile string
}

// Config reads the files and returns the server settings (TLS 1.2 at
// least). Errors name the flag and the file, never its contents.
func (f ServerFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if f.CertFile == "" || f.KeyFile == "" {
		errs = append(errs, errors.New("--tls-cert and --tls-key: give both"))
	} else if cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
		errs = append(errs, fmt.Errorf("--tls-cert %q and --tls-key %q: not a PEM certificate and its matching key: %w",
			f.CertFile, f.KeyFile, redact(err)))
	} else {
		cfg.Certificates = []tls.Certificate{cert}
	}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--client-ca %q: %w", f.ClientCAFile, err))
		case !pool.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("--client-ca %q: holds no PEM certificate", f.ClientCAFile))
		default:
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}
