package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
)

// A start refused for a secret setting prints what is wrong with it, never
// the secret: everything Run writes and the error Main prints are grepped
// for it.
func TestRefusedStartPrintsNoSecret(t *testing.T) {
	t.Parallel()
	valid := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	short := "c2hvcnRfYnV0X3NlY3JldF9rZXlfbWF0ZXJpYWw="
	for _, c := range []struct{ name, value, secret string }{
		{"REBILL_ENCRYPTION_KEY", short, short},
		{"REBILL_ENCRYPTION_OLD_KEYS", valid + "," + short, valid},
		{"REBILL_ENCRYPTION_OLD_KEYS", valid + "," + short, short},
		{"REBILL_ADMIN_KEY", "admin-short-secret-2026", "admin-short-secret-2026"},
		{"DATABASE_URL", "postgres://rebill:pa/ss-w0rd-sekret@127.0.0.1:1/rebill", "w0rd-sekret"},
		{"DATABASE_URL", "host=127.0.0.1 port=1 password=hunter2 sekret", "sekret"},
		{"REBILL_REPLICA_URL", "postgres://ro:repl/ica-sekret@127.0.0.1:1/rebill", "ica-sekret"},
	} {
		for _, command := range []string{"serve", "migrate", "secrets"} {
			env := map[string]string{"REBILL_DATA_DIR": t.TempDir(),
				"DATABASE_URL": "postgres://postgres@127.0.0.1:1/rebill?connect_timeout=1", c.name: c.value}
			var stdout, stderr strings.Builder
			err := app.Run(context.Background(), []string{"rebill", command}, func(k string) string { return env[k] }, &stdout, &stderr)
			require.Error(t, err, "%s %s", command, c.name)
			printed := stdout.String() + stderr.String() + "rebill: " + err.Error()
			require.Contains(t, printed, c.name)
			require.NotContains(t, printed, c.secret, "%s with a bad %s", command, c.name)
		}
	}
}
