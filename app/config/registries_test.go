package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/platform/mtls"
)

// writeKeyPair writes a self-signed certificate and its key as PEM files
// in dir and returns their paths.
func writeKeyPair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rebill"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

func TestRegistryFileYAMLAndJSONReadTheSame(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir)
	env := gatewayEnv(map[string]string{"AGENT_TOKEN": "token-value-77"})
	yamlFile := `
- name: bank-a
  kind: http
  base_url: https://gisgmp.bank-a.example/rebill/v1
  priority: 1
  timeout: 20s
  credentials: {bearer_token: AGENT_TOKEN}
  tls: {client_cert_file: ` + cert + `, client_key_file: ` + key + `, ca_file: ` + cert + `}
  payment_id: {format: uip, bik: "044525225", branch: "17"}
- name: bank-b
  kind: http
  base_url: http://127.0.0.1:9443/v1
  priority: 2
  payment_id: {format: uip, bik: "044525225", branch: "17"}
`
	regs, err := config.ParseRegistries([]byte(yamlFile), env, false)
	require.NoError(t, err)
	require.Len(t, regs, 2)
	a := regs[0]
	require.Equal(t, "bank-a", a.Name)
	require.Equal(t, config.RegistryHTTP, a.Kind)
	require.Equal(t, 20*time.Second, a.Timeout)
	require.Equal(t, map[string]string{"bearer_token": "token-value-77"}, a.Secrets, "the secret comes from the variable")
	require.Equal(t, mtls.Files{CertFile: cert, KeyFile: key, CAFile: cert}, a.TLSFiles)
	require.NotNil(t, a.TLS)
	require.Len(t, a.TLS.Certificates, 1)
	require.NotNil(t, a.TLS.RootCAs)
	require.Equal(t, config.RegistryPaymentID{Format: "uip", BIK: "044525225", Branch: "17"}, a.PaymentID)
	require.Equal(t, 2, regs[1].Priority)
	require.Nil(t, regs[1].TLS, "no file named: the system's trust store")
	require.Zero(t, regs[1].Timeout, "left to REBILL_GATEWAY_TIMEOUT")

	fromJSON, err := config.ParseRegistries([]byte(`[{"name": "bank-b", "kind": "http", "base_url": "http://127.0.0.1:9443/v1",
		"priority": 2, "payment_id": {"format": "uip", "bik": "044525225", "branch": "17"}}]`), env, false)
	require.NoError(t, err)
	require.Equal(t, regs[1:], fromJSON)
}

func TestRegistryDefaultsAreHexAndEqualPriority(t *testing.T) {
	t.Parallel()
	regs, err := config.ParseRegistries([]byte(`[{"name": "gmp1", "kind": "sim"}, {"name": "gmp2", "kind": "sim"}]`), gatewayEnv(nil), true)
	require.NoError(t, err)
	for _, r := range regs {
		require.Equal(t, 1, r.Priority)
		require.Equal(t, config.RegistryPaymentID{Format: "hex"}, r.PaymentID)
	}
}

// The simulated book is rebill's own table: outside dev mode a fine
// "posted" there would be captured unposted, so the start is refused,
// naming the entry.
func TestSimRegistryIsRefusedOutsideDevMode(t *testing.T) {
	t.Parallel()
	_, err := config.ParseRegistries([]byte(`[{"name": "gmp1", "kind": "sim"}]`), gatewayEnv(nil), false)
	require.ErrorContains(t, err, `registry "gmp1": kind: sim is dev mode's simulated registry`)
	require.ErrorContains(t, err, "refused outside dev mode")
}

// One start reports every fault of the file, one line each naming the
// file, the entry and the field, never a secret's value.
func TestRegistryFileReportsEveryError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, _ := writeKeyPair(t, dir)
	path := filepath.Join(dir, "registries.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
- name: a
  kind: http
  base_url: http://bank.example/v1
  priorty: 1
  timeout: 10
  credentials: {api_key: SOME_KEY, bearer_token: MISSING_TOKEN}
  tls: {client_cert_file: `+cert+`}
- name: b
  kind: http
  priority: 0
  payment_id: {format: uip, bik: "4452"}
- name: c
  kind: sim
  base_url: https://x.example
  payment_id: {format: base64}
- name: d
  kind: ftp
  tls: {cert: x}
- {kind: http, base_url: "https://ok.example"}
- name: a
  kind: http
  base_url: https://ok.example
  payment_id: {format: uip, bik: "044525225", branch: "1234567"}
`), 0o600))
	_, err := config.Load(gatewayEnv(map[string]string{"REBILL_REGISTRY_FILE": path, "SOME_KEY": "key-value-1623"}))
	require.Error(t, err)
	prefix := "REBILL_REGISTRY_FILE: " + path + ": "
	want := []string{
		`registry "a": base_url: want https (plain http only to a loopback address)`,
		`registry "a": credentials.api_key: kind http takes no such credential (it takes bearer_token)`,
		`registry "a": credentials.bearer_token: environment variable MISSING_TOKEN is not set or empty`,
		`registry "a": priorty: unknown field`,
		`registry "a": timeout: want string`,
		`registry "a": tls: client_cert_file and client_key_file: give both or neither`,
		`registry "b": base_url: required for kind http`,
		`registry "b": priority: want an integer of at least 1, got 0`,
		`registry "b": payment_id.bik: required for format uip`,
		`registry "b": payment_id: {format uip, bik 4452} differs from registry "a"'s {format hex}`,
		`registry "c": kind: sim is dev mode's simulated registry`,
		`registry "c": base_url: kind sim takes none`,
		`registry "c": payment_id.format: "base64" is not one of hex, uip`,
		`registry "c": payment_id: {format base64} differs from registry "a"'s {format hex}`,
		`registry "d": tls: json: unknown field "cert"`,
		`registry "d": kind: "ftp" is not one of http, sim`,
		`registry #5: name: want 1..64`,
		`registry "a": payment_id.branch: want up to 6 digits`,
		`registry "a": payment_id: {format uip, bik 044525225, branch 1234567} differs from registry "a"'s {format hex}`,
		`registry "a": name: already used by registry #1`,
	}
	msg := err.Error()
	for _, w := range want {
		require.Contains(t, msg, prefix+w)
	}
	lines := strings.Split(msg, "\n")
	require.Len(t, lines, len(want), msg)
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, prefix+"registry "), "line without the file and the entry: %q", line)
	}
	require.NotContains(t, msg, "key-value-1623", "a credential's value in the report")
}

func TestRegistryFileThroughLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "registries.yaml")
	require.NoError(t, os.WriteFile(path, []byte("- {name: gmp1, kind: sim}\n"), 0o600))
	cfg, err := config.Load(gatewayEnv(map[string]string{"REBILL_REGISTRY_FILE": path, "REBILL_DEV": "1"}))
	require.NoError(t, err)
	require.Len(t, cfg.Registries, 1)
	require.Equal(t, path, cfg.RegistryFile)

	_, err = config.Load(gatewayEnv(map[string]string{"REBILL_REGISTRY_FILE": path}))
	require.ErrorContains(t, err, `REBILL_REGISTRY_FILE: `+path+`: registry "gmp1": kind: sim is dev mode's`)

	_, err = config.Load(gatewayEnv(map[string]string{"REBILL_REGISTRY_FILE": filepath.Join(dir, "nope.yaml")}))
	require.ErrorContains(t, err, "read registry file")

	cfg, err = config.Load(gatewayEnv(nil))
	require.NoError(t, err)
	require.Empty(t, cfg.Registries, "no file: none configured")
}
