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
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

const billSourcesYAML = `
- name: gis-zhkh
  kind: http
  bills: housing
  base_url: https://bills.example.org/zhkh
  credentials: {token: ZHKH_TOKEN}
  timeout: 20s
  batch_size: 500
  rate_limit: 2.5
  reread_window: 72h
  silent_after: 1h
- name: gmp-bank
  kind: http
  bills: fines
  base_url: http://127.0.0.1:9300
`

func TestBillSourcesFileYAMLAndDefaults(t *testing.T) {
	t.Parallel()
	env := gatewayEnv(map[string]string{"ZHKH_TOKEN": "secret-token-1"})
	sources, err := config.ParseBillSources([]byte(billSourcesYAML), env)
	require.NoError(t, err)
	require.Len(t, sources, 2)
	zhkh := sources[0]
	require.Equal(t, config.BillSource{Name: "gis-zhkh", Kind: "http", Bills: "housing",
		BaseURL: "https://bills.example.org/zhkh", TokenEnv: "ZHKH_TOKEN", Token: "secret-token-1", Timeout: 20 * time.Second,
		BatchSize: 500, RateLimit: 2.5, RereadWindow: 72 * time.Hour, SilentAfter: time.Hour}, zhkh)
	gmp := sources[1]
	require.Equal(t, config.BillSource{Name: "gmp-bank", Kind: "http", Bills: "fines", BaseURL: "http://127.0.0.1:9300",
		Timeout: config.DefaultBillSourceTimeout, BatchSize: 200, RateLimit: 5, RereadWindow: 168 * time.Hour,
		SilentAfter: 30 * time.Minute}, gmp, "defaults apply")

	fromJSON, err := config.ParseBillSources([]byte(`[{"name":"gis-zhkh","kind":"http","bills":"housing",
		"base_url":"https://bills.example.org/zhkh","credentials":{"token":"ZHKH_TOKEN"},"timeout":"20s","batch_size":500,
		"rate_limit":2.5,"reread_window":"72h","silent_after":"1h"}]`), env)
	require.NoError(t, err)
	require.Equal(t, zhkh, fromJSON[0])

	noReread, err := config.ParseBillSources([]byte(`[{"name":"a","kind":"http","bills":"fines","base_url":"http://x","reread_window":"0"}]`), env)
	require.NoError(t, err)
	require.Zero(t, noReread[0].RereadWindow, "0 turns the re-read off")
}

// Every fault is reported on its own line, naming the entry and the
// field; no secret's value appears.
func TestBadBillSourcesFileNamesEveryEntryAndField(t *testing.T) {
	t.Parallel()
	env := gatewayEnv(map[string]string{"SET": "secret-value-42"})
	raw := `
- name: ok-housing
  kind: http
  bills: housing
  base_url: https://a.example
  credentials: {token: SET}
- name: second-housing
  kind: http
  bills: housing
  base_url: https://b.example
- name: bad one
  kind: soap
  bills: water
  base_url: ftp://user:secret-value-42@host
  credentials: {token: UNSET, password: SET}
  timeout: -1s
  batch_size: 1
  rate_limit: 0
  reread_window: soon
  silent_after: 30s
  colour: blue
- kind: http
  bills: fines
  base_url: https://c.example
  batch_size: 1001
  rate_limit: 5000
  tls: {client_cert_file: /nonexistent/cert.pem}
- name: ok-housing
  kind: http
  bills: fines
  base_url: http://d.example
  tls: {ca_file: /nonexistent/ca.pem, cert: x}
- name: nameless-fields
`
	_, err := config.ParseBillSources([]byte(raw), env)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`bill source "second-housing": bills: housing bills already come from bill source "ok-housing" (at most one source per kind of bill)`,
		`bill source "bad one": name: want 1..64 letters`,
		`bill source "bad one": kind: want "http", got "soap"`,
		`bill source "bad one": bills: want "housing" or "fines", got "water"`,
		`bill source "bad one": base_url: want an absolute http or https URL without user information`,
		`bill source "bad one": credentials.token: environment variable UNSET is not set or empty`,
		`bill source "bad one": credentials.password: unknown credential`,
		`bill source "bad one": timeout: want a positive duration`,
		`bill source "bad one": batch_size: want an integer from 2 to 1000, got 1`,
		`bill source "bad one": rate_limit: want requests per second above 0 and at most 1000, got 0`,
		`bill source "bad one": reread_window: want a duration of at least 0`,
		`bill source "bad one": silent_after: want at least 2m0s`,
		`bill source "bad one": colour: unknown field`,
		`bill source #4: name: want 1..64 letters`,
		`bill source #4: batch_size: want an integer from 2 to 1000, got 1001`,
		`bill source #4: rate_limit: want requests per second above 0 and at most 1000, got 5000`,
		`bill source #4: tls: client_cert_file and client_key_file: give both or neither`,
		`bill source "ok-housing": name: already used by bill source #1`,
		`bill source "ok-housing": tls: want {client_cert_file, client_key_file, ca_file}`,
		`bill source "nameless-fields": kind: required`,
		`bill source "nameless-fields": bills: required`,
		`bill source "nameless-fields": base_url: required`,
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "secret-value-42", "no secret value in a message")
}

func TestBillSourcesTLSFilesAreRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, selfSignedPEM(t), 0o600))
	sources, err := config.ParseBillSources([]byte(`[{"name":"a","kind":"http","bills":"fines","base_url":"https://x",
		"tls":{"ca_file":"`+ca+`"}}]`), gatewayEnv(nil))
	require.NoError(t, err)
	require.NotNil(t, sources[0].TLS)
	require.NotNil(t, sources[0].TLS.RootCAs)
	require.Equal(t, ca, sources[0].TLSFiles.CAFile)

	_, err = config.ParseBillSources([]byte(`[{"name":"a","kind":"http","bills":"fines","base_url":"http://x",
		"tls":{"ca_file":"`+ca+`"}}]`), gatewayEnv(nil))
	require.ErrorContains(t, err, `bill source "a": tls: needs an https base_url`)
}

func TestBillSourcesFileThroughLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(billSourcesYAML), 0o600))
	vars := map[string]string{"REBILL_BILL_SOURCES_FILE": path, "ZHKH_TOKEN": "t"}
	c, err := config.Load(gatewayEnv(vars))
	require.NoError(t, err)
	require.Len(t, c.BillSources, 2)

	delete(vars, "ZHKH_TOKEN")
	_, err = config.Load(gatewayEnv(vars))
	require.ErrorContains(t, err, `REBILL_BILL_SOURCES_FILE: `+path+`: bill source "gis-zhkh": credentials.token: environment variable ZHKH_TOKEN is not set or empty`)

	vars["REBILL_BILL_SOURCES_FILE"] = filepath.Join(t.TempDir(), "missing.yaml")
	_, err = config.Load(gatewayEnv(vars))
	require.ErrorContains(t, err, "REBILL_BILL_SOURCES_FILE: read bill sources file")

	c, err = config.Load(gatewayEnv(nil))
	require.NoError(t, err)
	require.Empty(t, c.BillSources, "no file: no configured sources")
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
