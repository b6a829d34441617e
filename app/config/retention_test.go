package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// REBILL_EVENTS_RETENTION: off unless set (empty or 0), days or a Go
// duration from 13 months (396 days) up; less, or anything unparsable, is
// refused by name with the minimum.
func TestEventsRetention(t *testing.T) {
	t.Parallel()
	load := func(value string) (config.Config, error) {
		return config.Load(func(name string) string {
			if name == "REBILL_EVENTS_RETENTION" {
				return value
			}
			return ""
		})
	}
	day := 24 * time.Hour
	require.Equal(t, 396*day, config.MinEventsRetention)
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0}, {"0", 0}, {"396d", 396 * day}, {"9504h", 396 * day}, {"400d", 400 * day}, {"9600h", 400 * day},
		{"3650d", 3650 * day},
	} {
		cfg, err := load(tc.value)
		require.NoError(t, err, tc.value)
		require.Equal(t, tc.want, cfg.EventsRetention, tc.value)
	}
	for _, bad := range []string{"395d", "9503h59m59s", "1y", "13mo", "400", "-400d", "d", "0s", "400 d", "99999999999999d"} {
		_, err := load(bad)
		require.ErrorContains(t, err, `REBILL_EVENTS_RETENTION="`+bad+`": want at least 13 months, 396d (9504h)`, bad)
	}
}
