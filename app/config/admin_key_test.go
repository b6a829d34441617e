package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// REBILL_ADMIN_KEY is a bearer secret with every right and no database
// row to revoke: a short one can be guessed, so it is refused at start.
func TestShortAdminKeyIsRefused(t *testing.T) {
	t.Parallel()
	env := func(key string) func(string) string {
		return func(name string) string {
			if name == "REBILL_ADMIN_KEY" {
				return key
			}
			return ""
		}
	}
	for _, short := range []string{"x", "e2e-admin-key", strings.Repeat("k", 31)} {
		_, err := config.Load(env(short))
		require.Error(t, err, "%d characters", len(short))
		require.Contains(t, err.Error(), "REBILL_ADMIN_KEY")
		require.Contains(t, err.Error(), "at least 32 characters")
	}
	for _, ok := range []string{"", strings.Repeat("k", 32)} {
		c, err := config.Load(env(ok))
		require.NoError(t, err, "%d characters", len(ok))
		require.Equal(t, ok, c.AdminKey)
	}
}
