package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// The parties file is read by the registry file's reader: YAML and JSON
// alike, kinds http and sim, priority, timeout, a bearer token from the
// environment and mTLS files.
func TestZhkhPartiesFileYAMLAndJSONReadTheSame(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir)
	env := gatewayEnv(map[string]string{"ZHKH_TOKEN": "token-value-77"})
	yamlFile := `
- name: bank-a
  kind: http
  base_url: https://gis-zhkh.bank-a.example/rebill/v1
  priority: 1
  timeout: 20s
  credentials: {bearer_token: ZHKH_TOKEN}
  tls: {client_cert_file: ` + cert + `, client_key_file: ` + key + `, ca_file: ` + cert + `}
- name: bank-b
  kind: http
  base_url: http://127.0.0.1:9443/v1
  priority: 2
`
	jsonFile := `[{"name": "bank-a", "kind": "http", "base_url": "https://gis-zhkh.bank-a.example/rebill/v1", "priority": 1,
		"timeout": "20s", "credentials": {"bearer_token": "ZHKH_TOKEN"},
		"tls": {"client_cert_file": "` + cert + `", "client_key_file": "` + key + `", "ca_file": "` + cert + `"}},
		{"name": "bank-b", "kind": "http", "base_url": "http://127.0.0.1:9443/v1", "priority": 2}]`
	fromYAML, err := config.ParseZhkhParties([]byte(yamlFile), env, false)
	require.NoError(t, err)
	fromJSON, err := config.ParseZhkhParties([]byte(jsonFile), env, false)
	require.NoError(t, err)
	require.Len(t, fromYAML, 2)
	for i := range fromYAML {
		require.Equal(t, fromYAML[i].Name, fromJSON[i].Name)
		require.Equal(t, fromYAML[i].Priority, fromJSON[i].Priority)
		require.Equal(t, fromYAML[i].Timeout, fromJSON[i].Timeout)
		require.Equal(t, fromYAML[i].Secrets, fromJSON[i].Secrets)
	}
	require.Equal(t, 20*time.Second, fromYAML[0].Timeout)
	require.Equal(t, "token-value-77", fromYAML[0].Secrets[config.RegistryBearerCredential])
	require.NotNil(t, fromYAML[0].TLS)
	require.NotEmpty(t, fromYAML[0].TLS.Certificates, "rebill's client certificate")
	require.Nil(t, fromYAML[1].TLS)
}

// Every fault is named, by entry and field, in one error; a secret's
// value never appears; sim is refused outside dev mode.
func TestZhkhPartiesFileFaults(t *testing.T) {
	t.Parallel()
	env := gatewayEnv(map[string]string{"ZHKH_TOKEN": "secret-value-99"})
	_, err := config.ParseZhkhParties([]byte(`
- name: sim1
  kind: sim
- name: plain
  kind: http
  base_url: http://gis-zhkh.example/v1
  credentials: {bearer_token: ZHKH_TOKEN, password: ZHKH_TOKEN}
- name: plain
  kind: ftp
  priority: 0
  retries: 3
`), env, false)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`party "sim1": kind: sim is dev mode's simulated party`,
		`party "plain": base_url: want https`,
		`party "plain": credentials.password: kind http takes no such credential`,
		`party "plain": kind: "ftp" is not one of http, sim`,
		`party "plain": priority: want an integer of at least 1`,
		`party "plain": retries: unknown field`,
		`party "plain": name: already used by party #2`,
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "secret-value-99")
	parties, err := config.ParseZhkhParties([]byte(`[{"name": "sim1", "kind": "sim"}]`), env, true)
	require.NoError(t, err)
	require.Equal(t, "sim", parties[0].Kind)
}

// REBILL_ZHKH_PARTIES_FILE is read at load, its faults prefixed by the
// variable and the file.
func TestZhkhPartiesFileVariable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "zhkh.yaml")
	require.NoError(t, os.WriteFile(path, []byte("- name: x\n  kind: nope\n"), 0o600))
	_, err := config.Load(gatewayEnv(map[string]string{"REBILL_ZHKH_PARTIES_FILE": path, "DATABASE_URL": "postgres://localhost/rebill"}))
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "REBILL_ZHKH_PARTIES_FILE: "+path+": "), err.Error())
}
