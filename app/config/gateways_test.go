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

func gatewayEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

const productionYAML = `
- name: stripe-eu
  kind: stripe
  priority: 2
  commission_bps: {"EUR": 140, "*": 290}
  currencies: [EUR, USD]
  hold_lifetime: 114h
  timeout: 15s
  credentials: {api_key: STRIPE_SECRET_KEY}
- name: yookassa
  kind: yookassa
  priority: 1
  commission_bps: {"RUB": 250}
  currencies: [RUB]
  credentials:
    shop_id: YOOKASSA_SHOP_ID
    secret_key: YOOKASSA_SECRET_KEY
- name: sim-staging
  kind: sim
  base_url: http://127.0.0.1:8090/sim1
  priority: 9
  commission_bps: {"*": 0}
  currencies: [RUB, EUR]
`

func TestGatewaysFileYAMLAndJSONReadTheSame(t *testing.T) {
	t.Parallel()
	env := gatewayEnv(map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "YOOKASSA_SHOP_ID": "1234",
		"YOOKASSA_SECRET_KEY": "live_x"})
	fromYAML, err := config.ParseGateways([]byte(productionYAML), env)
	require.NoError(t, err)
	require.Len(t, fromYAML, 3)
	stripe := fromYAML[0]
	require.Equal(t, "stripe-eu", stripe.Name)
	require.Equal(t, "stripe", stripe.Kind)
	require.Equal(t, 2, stripe.Priority)
	require.Equal(t, map[string]int64{"EUR": 140, "*": 290}, stripe.CommissionBPS)
	require.Equal(t, []string{"EUR", "USD"}, stripe.Currencies)
	require.Equal(t, 114*time.Hour, stripe.HoldLifetime)
	require.Equal(t, 15*time.Second, stripe.Timeout)
	require.Equal(t, map[string]string{"api_key": "sk_test_1"}, stripe.Secrets, "the secret comes from the variable")
	require.Equal(t, map[string]string{"api_key": "STRIPE_SECRET_KEY"}, stripe.Credentials)
	require.Equal(t, map[string]string{"shop_id": "1234", "secret_key": "live_x"}, fromYAML[1].Secrets)
	require.Zero(t, fromYAML[1].HoldLifetime, "left to the kind's default")

	fromJSON, err := config.ParseGateways([]byte(`[{"name": "stripe-eu", "kind": "stripe", "priority": 2,
		"commission_bps": {"EUR": 140, "*": 290}, "currencies": ["EUR", "USD"], "hold_lifetime": "114h",
		"timeout": "15s", "credentials": {"api_key": "STRIPE_SECRET_KEY"}}]`), env)
	require.NoError(t, err)
	require.Equal(t, fromYAML[:1], fromJSON)
}

// A bad file stops the start with a message naming the entry and the field.
func TestBadGatewaysFileIsRefusedNamingEntryAndField(t *testing.T) {
	t.Parallel()
	env := gatewayEnv(map[string]string{"KEY": "secret"})
	entry := func(extra string) string {
		return `[{"name": "gw1", "kind": "sim", "base_url": "http://127.0.0.1:1/sim1", "priority": 1,
			"commission_bps": {"RUB": 250}, "currencies": ["RUB"]` + extra + `}]`
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"not a list", `{"name": "gw1"}`, []string{"want a list of gateways"}},
		{"empty list", `[]`, []string{"the list is empty"}},
		{"not YAML either", "- name: [unclosed", []string{"neither JSON nor YAML"}},
		{"unknown field", entry(`, "comission_bps": {}`), []string{`gateway "gw1"`, "comission_bps: unknown field"}},
		{"unknown field in YAML", "- name: gw1\n  kind: sim\n  priorty: 1\n", []string{`gateway "gw1"`, "priorty: unknown field"}},
		{"wrong type", entry(`, "timeout": 10`), []string{`gateway "gw1"`, "timeout: want string"}},
		{"no name", `[{"kind": "sim"}]`, []string{"gateway #1", "name: want 1..64"}},
		{"bad name", `[{"name": "a b", "kind": "sim"}]`, []string{`gateway "a b"`, "name: want"}},
		{"no kind", `[{"name": "gw1", "priority": 1}]`, []string{`gateway "gw1"`, "kind: required"}},
		{"duplicate names", `[` + entry("")[1:len(entry(""))-1] + `,` + entry("")[1:],
			[]string{`gateway "gw1"`, "name: already used by gateway #1"}},
		{"bad base_url", entry(`, "base_url": "127.0.0.1:8090"`), []string{`gateway "gw1"`, "base_url: want an absolute http or https URL"}},
		{"no priority", `[{"name": "gw1", "kind": "sim", "commission_bps": {"RUB": 1}, "currencies": ["RUB"]}]`,
			[]string{`gateway "gw1"`, "priority: required"}},
		{"zero priority", `[{"name": "gw1", "kind": "sim", "priority": 0, "commission_bps": {"RUB": 1}, "currencies": ["RUB"]}]`,
			[]string{"priority: want an integer of at least 1, got 0"}},
		{"bad duration", entry(`, "hold_lifetime": "4 days"`), []string{`gateway "gw1"`, `hold_lifetime: want a positive duration`}},
		{"negative timeout", entry(`, "timeout": "-1s"`), []string{`gateway "gw1"`, `timeout: want a positive duration`}},
		{"lower-case currency", `[{"name": "gw1", "kind": "sim", "priority": 1, "commission_bps": {"*": 1}, "currencies": ["rub"]}]`,
			[]string{`gateway "gw1"`, `currencies[0]: "rub" is not an ISO 4217 currency code`}},
		{"no currencies", `[{"name": "gw1", "kind": "sim", "priority": 1, "commission_bps": {"*": 1}}]`,
			[]string{"currencies: required"}},
		{"negative commission", `[{"name": "gw1", "kind": "sim", "priority": 1, "commission_bps": {"RUB": -5}, "currencies": ["RUB"]}]`,
			[]string{`gateway "gw1"`, "commission_bps.RUB: want basis points between 0 and 10000, got -5"}},
		{"commission for a currency not taken", `[{"name": "gw1", "kind": "sim", "priority": 1, "commission_bps": {"RUB": 5, "USD": 5}, "currencies": ["RUB"]}]`,
			[]string{"commission_bps.USD: not one of the gateway's currencies"}},
		{"currency without commission", `[{"name": "gw1", "kind": "sim", "priority": 1, "commission_bps": {"RUB": 5}, "currencies": ["RUB", "EUR"]}]`,
			[]string{"commission_bps: no commission for EUR"}},
		{"unset credential variable", entry(`, "credentials": {"api_key": "MISSING_VAR"}`),
			[]string{`gateway "gw1"`, "credentials.api_key: environment variable MISSING_VAR is not set or empty"}},
		{"empty credential variable name", entry(`, "credentials": {"api_key": ""}`),
			[]string{"credentials.api_key: want the name of the environment variable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.ParseGateways([]byte(tc.file), env)
			require.Error(t, err)
			for _, want := range tc.want {
				require.Contains(t, err.Error(), want)
			}
			require.NotContains(t, err.Error(), "secret", "no secret value in a message")
		})
	}
}

func TestGatewaysFileThroughLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "gateways.yaml")
	require.NoError(t, os.WriteFile(path, []byte(productionYAML), 0o600))
	env := map[string]string{"REBILL_GATEWAYS_FILE": path, "STRIPE_SECRET_KEY": "sk", "YOOKASSA_SHOP_ID": "1",
		"YOOKASSA_SECRET_KEY": "s"}
	cfg, err := config.Load(gatewayEnv(env))
	require.NoError(t, err)
	require.Len(t, cfg.Gateways, 3)

	delete(env, "YOOKASSA_SECRET_KEY")
	_, err = config.Load(gatewayEnv(env))
	require.ErrorContains(t, err, `REBILL_GATEWAYS_FILE: `+path+`: gateway "yookassa": credentials.secret_key: environment variable YOOKASSA_SECRET_KEY is not set or empty`)

	env["YOOKASSA_SECRET_KEY"] = "s"
	env["REBILL_GATEWAYS"] = "sim1=http://127.0.0.1:1/sim1"
	_, err = config.Load(gatewayEnv(env))
	require.ErrorContains(t, err, "REBILL_GATEWAYS_FILE and REBILL_GATEWAYS are both set")

	_, err = config.Load(gatewayEnv(map[string]string{"REBILL_GATEWAYS_FILE": filepath.Join(dir, "nope.yaml")}))
	require.ErrorContains(t, err, "read gateways file")
}

func TestGatewaysShorthandIsSimulatorsInOrder(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(gatewayEnv(map[string]string{"REBILL_GATEWAYS": "b=http://h/b, a=http://h/a"}))
	require.NoError(t, err)
	require.Len(t, cfg.Gateways, 2)
	require.Equal(t, config.Gateway{Name: "b", Kind: "sim", BaseURL: "http://h/b", Priority: 1,
		CommissionBPS: map[string]int64{"*": 0}}, cfg.Gateways[0])
	require.Equal(t, "a", cfg.Gateways[1].Name)
	require.Equal(t, 2, cfg.Gateways[1].Priority)

	_, err = config.Load(gatewayEnv(map[string]string{"REBILL_GATEWAYS": "a=http://h/a,a=http://h/b"}))
	require.ErrorContains(t, err, `gateway "a" is listed twice`)
}

func TestDevGatewaysFollowAPIMD(t *testing.T) {
	t.Parallel()
	devs := config.DevGateways("http://127.0.0.1:1")
	require.Len(t, devs, 5)
	for i, want := range []int64{150, 180, 200, 250, 300} {
		require.Equal(t, want, devs[i].CommissionBPS["*"])
		require.Equal(t, i+1, devs[i].Priority)
		require.Equal(t, 7*24*time.Hour, devs[i].HoldLifetime)
	}
	require.Equal(t, "http://127.0.0.1:1/sim3", devs[2].BaseURL)
}

// One start reports every error of the whole file, each line naming the
// file, the entry and the field: a wrong type or an unknown field does not
// hide the entry's other errors.
func TestGatewaysFileReportsEveryError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gateways.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
- name: gw1
  kind: sim
  timeout: 10
  priorty: 1
  currencies: [rub]
  commission_bps: {"*": 1}
- name: gw2
  priority: 0
  hold_lifetime: 4 days
  commission_bps: {"*": 1}
  currencies: [RUB]
  credentials: {api_key: MISSING_VAR}
- name: gw2
  kind: sim
  priority: 1
  commission_bps: {"*": 1}
  currencies: [RUB]
`), 0o600))
	_, err := config.LoadGatewaysFile(path, gatewayEnv(nil))
	require.Error(t, err)
	want := []string{
		`gateway "gw1": timeout: want string`,
		`gateway "gw1": priorty: unknown field`,
		`gateway "gw1": base_url: required for kind sim`,
		`gateway "gw1": priority: required`,
		`gateway "gw1": currencies[0]: "rub" is not an ISO 4217 currency code`,
		`gateway "gw2": kind: required`,
		`gateway "gw2": priority: want an integer of at least 1, got 0`,
		`gateway "gw2": hold_lifetime: want a positive duration`,
		`gateway "gw2": credentials.api_key: environment variable MISSING_VAR is not set or empty`,
		`gateway "gw2": base_url: required for kind sim`,
		`gateway "gw2": name: already used by gateway #2`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		require.Contains(t, err.Error(), path+": "+w)
	}
	require.Len(t, lines, len(want), err.Error())
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, path+": gateway "), "line without the file and the entry: %q", line)
	}
}

// The kinds' rules (an unknown kind, a base URL or a credential the kind
// needs, a credential it does not take) are checked in the same pass as
// the fields: a file with faults of every sort is reported whole in one
// start, one line per fault, never with a credential's value.
func TestGatewaysFileReportsKindAndFieldErrorsTogether(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gateways.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
- name: gw1
  kind: sim
  base_url: http://127.0.0.1:1/sim1
  timeout: 10
  priority: 1
  currencies: [rub]
  commission_bps: {"*": 1}
- {name: pp, kind: paypal, priority: 1, commission_bps: {"*": 1}, currencies: [USD], credentials: {token: PP_TOKEN}}
- {name: nourl, kind: sim, priority: 2, commission_bps: {"*": 1}, currencies: [USD]}
- {name: st, kind: stripe, priority: 3, commission_bps: {"*": 1}, currencies: [USD], credentials: {api_key: MISSING_STRIPE_KEY}}
- {name: yk, kind: yookassa, priority: 4, commission_bps: {"*": 1}, currencies: [RUB], credentials: {shop_id: SHOP_ID}}
- {name: keyed, kind: sim, base_url: "http://127.0.0.1:1/sim2", priority: 5, commission_bps: {"*": 1},
   currencies: [USD], credentials: {api_key: SOME_KEY}}
- {name: gw1, kind: sim, base_url: "http://127.0.0.1:1/sim3", priority: 6, commission_bps: {"*": 1}, currencies: [USD]}
- {kind: stripe, priority: 7, commission_bps: {"*": 1}, currencies: [USD]}
`), 0o600))
	env := gatewayEnv(map[string]string{"SHOP_ID": "shop-value-4815", "SOME_KEY": "key-value-1623", "PP_TOKEN": "pp-value-42"})
	_, err := config.LoadGatewaysFile(path, env)
	require.Error(t, err)
	want := []string{
		`gateway "gw1": timeout: want string`,
		`gateway "gw1": currencies[0]: "rub" is not an ISO 4217 currency code`,
		`gateway "pp": kind: "paypal" is not one of sim, stripe, yookassa`,
		`gateway "nourl": base_url: required for kind sim`,
		`gateway "st": credentials.api_key: environment variable MISSING_STRIPE_KEY is not set or empty`,
		`gateway "yk": credentials.secret_key: required for kind yookassa: the name of the environment variable that holds it`,
		`gateway "keyed": credentials.api_key: kind sim takes no such credential (it takes none)`,
		`gateway "gw1": name: already used by gateway #1`,
		`gateway #8: name: want 1..64 letters`,
		`gateway #8: credentials.api_key: required for kind stripe`,
	}
	msg := err.Error()
	for _, w := range want {
		require.Contains(t, msg, path+": "+w)
	}
	lines := strings.Split(msg, "\n")
	require.Len(t, lines, len(want), msg)
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, path+": gateway "), "line without the file and the entry: %q", line)
	}
	for _, secret := range []string{"shop-value-4815", "key-value-1623", "pp-value-42"} {
		require.NotContains(t, msg, secret, "a credential's value in the report")
	}
}

// Every kind's rules are in the table: a good entry of each kind passes,
// and the table names the credentials each kind takes.
func TestGatewayKindsTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"sim", "stripe", "yookassa"}, config.GatewayKindNames())
	require.Equal(t, []string{"api_key"}, config.GatewayKinds["stripe"].Credentials)
	require.Equal(t, []string{"shop_id", "secret_key"}, config.GatewayKinds["yookassa"].Credentials)
	require.True(t, config.GatewayKinds["sim"].NeedsBaseURL)
	require.Empty(t, config.GatewayKinds["sim"].Credentials)
	for _, kind := range config.GatewayKindNames() {
		require.Positive(t, config.GatewayKinds[kind].HoldLifetime, kind)
	}
}
