package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// REBILL_STARTUP_RETRY_FOR: a minute unless set, 0 turns the retry off,
// and anything negative, unparsable or over an hour is refused by name.
func TestStartupRetryFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", time.Minute}, {"0", 0}, {"0s", 0}, {"15s", 15 * time.Second}, {"1h", time.Hour},
	} {
		cfg, err := config.Load(func(name string) string {
			if name == "REBILL_STARTUP_RETRY_FOR" {
				return tc.value
			}
			return ""
		})
		require.NoError(t, err, tc.value)
		require.Equal(t, tc.want, cfg.StartupRetryFor, tc.value)
	}
	for _, bad := range []string{"-1s", "forever", "61m", "10"} {
		_, err := config.Load(func(name string) string {
			if name == "REBILL_STARTUP_RETRY_FOR" {
				return bad
			}
			return ""
		})
		require.ErrorContains(t, err, `REBILL_STARTUP_RETRY_FOR="`+bad+`": want a duration from 0s to 1h`, bad)
	}
}
