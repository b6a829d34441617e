package mtls_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rebill/rebill/platform/mtls"
)

func TestHalfAKeyPairIsRefused(t *testing.T) {
	_, err := mtls.Files{CertFile: "c.pem"}.Config()
	if err == nil || !strings.Contains(err.Error(), "give both or neither") {
		t.Fatalf("want a refusal of a certificate without its key, got %v", err)
	}
}

func TestBadFilesAreNamedNotQuoted(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key.pem")
	secret := "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
	if err := os.WriteFile(key, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := mtls.Files{CertFile: key, KeyFile: key, CAFile: ca}.Config()
	if err == nil {
		t.Fatal("want an error for a key given as a certificate and a CA file without certificates")
	}
	msg := err.Error()
	for _, want := range []string{"client_cert_file", "ca_file", "holds no PEM certificate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, "c2VjcmV0") {
		t.Errorf("error quotes the key file: %q", msg)
	}
}

func TestNoFilesIsTheSystemTrustStore(t *testing.T) {
	cfg, err := mtls.Files{}.Config()
	if err != nil || cfg.RootCAs != nil || len(cfg.Certificates) != 0 {
		t.Fatalf("want the system trust store and no client certificate, got %+v, %v", cfg, err)
	}
}
