package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
)

const longAdminKey = "gateways-test-admin-key-0123456789abcdef"

// productionEnv is a production-mode (no REBILL_DEV) environment.
func productionEnv(overrides map[string]string) func(string) string {
	env := map[string]string{
		"REBILL_ADMIN_KEY":       longAdminKey,
		"REBILL_GATEWAY_TIMEOUT": "1s",
		"REBILL_LOG_LEVEL":       "info",
		"REBILL_DB_MAX_CONNS":    "8",
		"REBILL_ENCRYPTION_KEY":  "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
	}
	for k, v := range overrides {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func TestProductionGatewaysAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	root, stop, err := sim.Start(ctx, pool, []string{"sim1", "sim2"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })

	build := func(t *testing.T, gateways string) (string, error) {
		t.Helper()
		cfg, err := config.Load(productionEnv(map[string]string{"REBILL_GATEWAYS": gateways}))
		require.NoError(t, err)
		var logs bytes.Buffer
		svc, err := app.Build(ctx, cfg, pool, zerolog.New(&logs))
		if err == nil {
			svc.Close()
		}
		return logs.String(), err
	}

	t.Run("good URLs start", func(t *testing.T) {
		logs, err := build(t, "sim1="+root+"/sim1,acme="+root+"/sim2")
		require.NoError(t, err)
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"level":"warn"`) && !strings.Contains(line, "no state payment registry") {
				require.Contains(t, line, "no GIS ZhKH party", "the only warnings: production has no registry nor GIS ZhKH party yet")
			}
		}
	})

	t.Run("a URL answering 404 names its gateway", func(t *testing.T) {
		_, err := build(t, "sim1="+root+"/sim1,typo="+root+"/simX,bare="+root)
		require.Error(t, err)
		msg := err.Error()
		require.Contains(t, msg, "REBILL_GATEWAYS")
		require.Contains(t, msg, "gateway typo: "+root+"/simX/health answered 404")
		require.Contains(t, msg, "gateway bare: "+root+"/health answered 404")
		require.NotContains(t, msg, "gateway sim1")
	})

	t.Run("a URL nobody answers names its gateway", func(t *testing.T) {
		_, err := build(t, "gone="+closedPortURL(t)+"/sim1")
		require.ErrorContains(t, err, "gateway gone: no answer from")
	})

	t.Run("a gateway that is down starts with a warning", func(t *testing.T) {
		_, err := sim.NewStore(pool).SetFaults(ctx, "sim2", sim.FaultsPatch{Down: new(true)})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = sim.NewStore(pool).SetFaults(ctx, "sim2", sim.FaultsPatch{Down: new(false)}) })
		logs, err := build(t, "sim2="+root+"/sim2")
		require.NoError(t, err)
		require.Contains(t, logs, "gateway is down at start")
		require.Contains(t, logs, `"gateway":"sim2"`)
	})

	t.Run("no gateway warns", func(t *testing.T) {
		logs, err := build(t, "")
		require.NoError(t, err)
		require.Contains(t, logs, `"level":"warn"`)
		require.Contains(t, logs, "no gateway configured")
	})
}

// An operator's view: `rebill serve` with a mistyped gateway URL exits at
// once with an error naming it, before it listens.
func TestServeRefusesABadGatewayURL(t *testing.T) {
	t.Parallel()
	env := productionEnv(map[string]string{
		"DATABASE_URL":    dbtest.URL(t),
		"REBILL_ADDR":     "127.0.0.1:0",
		"REBILL_GATEWAYS": "sim1=" + closedPortURL(t) + "/sim1",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	err := app.Run(ctx, []string{"rebill", "serve"}, env, io.Discard, &stderr)
	require.ErrorContains(t, err, "gateway sim1")
	require.NotContains(t, stderr.String(), "rebill listening")
}

// A gateways file with faults of every sort (a field of the wrong type, a
// bad currency, an unknown kind, a kind's missing base URL or credential, a
// credential the kind does not take, an unset credential variable, a
// duplicate name) stops the start with all of them reported at once, one
// line each naming the file, the entry and the field, and no credential's
// value.
func TestServeRefusesABadGatewaysFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gateways.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
- {name: typed, kind: sim, base_url: "http://127.0.0.1:1/sim1", priority: 1, commission_bps: {"*": 100},
   currencies: [usd], timeout: 10}
- {name: pp, kind: paypal, priority: 1, commission_bps: {"*": 100}, currencies: [USD]}
- {name: nourl, kind: sim, priority: 2, commission_bps: {"*": 100}, currencies: [USD]}
- {name: keyed, kind: sim, base_url: "http://127.0.0.1:1/sim1", priority: 3, commission_bps: {"*": 100},
   currencies: [USD], credentials: {api_key: SOME_KEY}}
- {name: st, kind: stripe, priority: 4, commission_bps: {"*": 100}, currencies: [USD],
   credentials: {api_key: UNSET_STRIPE_KEY}}
- {name: yk, kind: yookassa, priority: 5, commission_bps: {"*": 100}, currencies: [RUB],
   credentials: {shop_id: SHOP_ID}}
- {name: pp, kind: sim, base_url: "http://127.0.0.1:1/sim2", priority: 6, commission_bps: {"*": 100}, currencies: [USD]}
`), 0o600))
	env := productionEnv(map[string]string{
		"DATABASE_URL":         dbtest.URL(t),
		"REBILL_ADDR":          "127.0.0.1:0",
		"REBILL_GATEWAYS_FILE": path,
		"SOME_KEY":             "some-key-value-7731",
		"SHOP_ID":              "shop-id-value-5512",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr strings.Builder
	err := app.Run(ctx, []string{"rebill", "serve"}, env, &stdout, &stderr)
	require.Error(t, err)
	msg := err.Error()
	want := []string{
		`gateway "typed": currencies[0]: "usd" is not an ISO 4217 currency code`,
		`gateway "typed": timeout: want string`,
		`gateway "pp": kind: "paypal" is not one of sim, stripe, yookassa`,
		`gateway "nourl": base_url: required for kind sim`,
		`gateway "keyed": credentials.api_key: kind sim takes no such credential (it takes none)`,
		`gateway "st": credentials.api_key: environment variable UNSET_STRIPE_KEY is not set or empty`,
		`gateway "yk": credentials.secret_key: required for kind yookassa`,
		`gateway "pp": name: already used by gateway #2`,
	}
	prefix := "REBILL_GATEWAYS_FILE: " + path + ": "
	for _, w := range want {
		require.Contains(t, msg, prefix+w)
	}
	lines := strings.Split(msg, "\n")
	require.Len(t, lines, len(want), msg)
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, prefix+"gateway "), "a line without the file and the entry: %q", line)
	}
	for _, secret := range []string{"some-key-value-7731", "shop-id-value-5512"} {
		require.NotContains(t, msg, secret)
		require.NotContains(t, stdout.String()+stderr.String(), secret)
	}
	require.NotContains(t, stderr.String(), "rebill listening")
}

// A gateways file with a working simulator starts, and the gateway takes
// the file's settings.
func TestServeStartsWithAGatewaysFile(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	root, stop, err := sim.Start(ctx, pool, []string{"sim1"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	path := filepath.Join(t.TempDir(), "gateways.json")
	require.NoError(t, os.WriteFile(path, []byte(`[{"name": "acme", "kind": "sim", "base_url": "`+root+`/sim1",
		"priority": 1, "commission_bps": {"RUB": 250}, "currencies": ["RUB"], "timeout": "3s"}]`), 0o600))
	cfg, err := config.Load(productionEnv(map[string]string{"REBILL_GATEWAYS_FILE": path}))
	require.NoError(t, err)
	var logs bytes.Buffer
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(&logs))
	require.NoError(t, err)
	svc.Close()
	require.Contains(t, logs.String(), `"gateway":"acme"`)
	require.Contains(t, logs.String(), "gateway answers its health probe")
}
