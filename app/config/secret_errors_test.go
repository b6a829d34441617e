package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
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

// A connection string in any form with an option the pool cannot take is
// refused at start, naming the setting and the option, and the password
// appears nowhere: the driver's own error quotes the whole string and
// masks only "password=..." without spaces.
func TestDatabaseURLErrorsHoldNoPassword(t *testing.T) {
	t.Parallel()
	const secret = "S3cret-pw"
	forms := map[string]string{
		"URL":                        "postgres://rebill:" + secret + "@db.internal:5432/rebill?sslmode=require",
		"URL, password in query":     "postgresql://rebill@db.internal/rebill?password=" + secret,
		"keyword/value":              "host=db.internal user=rebill password=" + secret,
		"keyword/value, spaces":      "host=db.internal user=rebill password = " + secret,
		"keyword/value, space left":  "host=db.internal user=rebill password =" + secret,
		"keyword/value, space right": "host=db.internal user=rebill password= " + secret,
		"keyword/value, quoted":      "host=db.internal user=rebill password = '" + secret + " x'",
		"keyword/value, first":       "password = " + secret + " host=db.internal user=rebill",
	}
	bad := map[string]string{
		"pool_max_conns":           "many",
		"pool_min_conns":           "x",
		"pool_max_conn_lifetime":   "forever",
		"statement_cache_capacity": "x",
		"default_query_exec_mode":  "bogus",
		"connect_timeout":          "soon",
		"sslmode":                  "bogus",
		"target_session_attrs":     secret, // an error that would quote the value
		"port":                     "x",
	}
	for form, conn := range forms {
		for option, value := range bad {
			v := conn + " " + option + "=" + value
			if strings.HasPrefix(conn, "postgres") {
				sep := "?"
				if strings.Contains(conn, "?") {
					sep = "&"
				}
				v = conn + sep + option + "=" + value
			}
			for _, name := range []string{"DATABASE_URL", "REBILL_REPLICA_URL"} {
				_, err := config.Load(func(k string) string {
					if k == name {
						return v
					}
					return ""
				})
				require.Error(t, err, "%s %s with %s", name, form, option)
				msg := err.Error()
				require.True(t, strings.HasPrefix(msg, name+": cannot be parsed"), "%s", msg)
				require.NotContains(t, msg, secret, "%s %s with %s", name, form, option)
				require.NotContains(t, msg, "db.internal", "no part of the value")
				if option != "target_session_attrs" {
					require.Contains(t, msg, option, "names what is wrong")
				}
			}
			_, err := config.ParsePoolConfig(v)
			require.Error(t, err)
			require.NotContains(t, err.Error(), secret)
			require.Nil(t, errors.Unwrap(err), "wraps no driver error, which would quote the string")
		}
	}
}
