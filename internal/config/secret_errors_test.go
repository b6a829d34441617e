package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/config"
)

// secretRefusal is a start refused for a secret setting: the message must
// name the variable and what is wrong, and hold none of the secret parts.
type secretRefusal struct {
	Name, Value string
	Secrets     []string // substrings that must not appear (a key, a password)
	Says        string   // what the message must say
}

// secretRefusals are refused starts, one or more per way a secret setting
// can be wrong.
func secretRefusals() []secretRefusal {
	valid := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	short := "c2hvcnRfYnV0X3NlY3JldF9rZXlfbWF0ZXJpYWw=" // 29 bytes
	return []secretRefusal{
		{"REBILL_ENCRYPTION_KEY", short, []string{short, "c2hvcnRfYnV0"}, "got 29 bytes"},
		{"REBILL_ENCRYPTION_KEY", "not!base64!secret-key-material", []string{"secret-key-material"}, "base64"},
		{"REBILL_ENCRYPTION_OLD_KEYS", valid + "," + short, []string{valid, short, "c2hvcnRfYnV0", "AAECAwQF"}, "entry 2 of 2"},
		{"REBILL_ENCRYPTION_OLD_KEYS", "zz!!oldsecret," + valid, []string{valid, "oldsecret", "AAECAwQF"}, "entry 1 of 2"},
		{"REBILL_ADMIN_KEY", "admin-short-secret-2026", []string{"admin-short-secret-2026"}, "at least 32 characters"},
		{"DATABASE_URL", "postgres://rebill:pa/ss-w0rd-sekret@db.internal:5432/rebill", []string{"ss-w0rd-sekret", "pa/ss"}, "password"},
		{"DATABASE_URL", "postgres://rebill:pa%zzw0rd-sekret@db.internal/rebill", []string{"w0rd-sekret", "pa%zz"}, "password"},
		{"DATABASE_URL", "postgres://rebill:hunter2 sekret@db.internal/rebill", []string{"hunter2", "sekret"}, "cannot be parsed"},
		{"DATABASE_URL", "host=db.internal password=hunter2 sekret user=rebill", []string{"hunter2", "sekret"}, "cannot be parsed"},
		{"DATABASE_URL", "postgres://rebill:hunter2-sekret@db.internal:99999/rebill", []string{"hunter2-sekret"}, "port"},
		{"REBILL_REPLICA_URL", "postgres://ro:repl/ica-sekret@replica.internal:5432/rebill", []string{"ica-sekret", "repl/ica"}, "password"},
		{"REBILL_REPLICA_URL", "postgresql://ro:replica-sekret@replica.internal/rebill?sslmode=bogus", []string{"replica-sekret"}, "sslmode"},
	}
}

func TestSecretSettingsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, r := range secretRefusals() {
		_, err := config.Load(func(k string) string {
			if k == r.Name {
				return r.Value
			}
			return ""
		})
		require.Error(t, err, "%s is refused", r.Name)
		msg := err.Error()
		require.True(t, strings.HasPrefix(msg, r.Name+": "), "names the variable: %s", msg)
		require.Contains(t, msg, r.Says)
		for _, secret := range append(r.Secrets, r.Value) {
			require.NotContains(t, msg, secret, "%s's error", r.Name)
		}
	}
}
