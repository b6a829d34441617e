package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

func TestVelocityAndOldKeys(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	require.Equal(t, [3]int{20, 10, 5}, [3]int{c.VelocityCreationsPerHour, c.VelocityCardChangesPerDay, c.VelocityDeclinesPerDay},
		"API.md's defaults")
	require.Empty(t, c.EncryptionOldKeys)

	c, err = load(map[string]string{"REBILL_VELOCITY_CREATIONS_PER_HOUR": "0", "REBILL_VELOCITY_DECLINES_PER_DAY": "7",
		"REBILL_ENCRYPTION_OLD_KEYS": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=, AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"})
	require.NoError(t, err)
	require.Zero(t, c.VelocityCreationsPerHour, "0 turns a limit off")
	require.Equal(t, 7, c.VelocityDeclinesPerDay)
	require.Len(t, c.EncryptionOldKeys, 2)

	for name, value := range map[string]string{
		"REBILL_VELOCITY_CARD_CHANGES_PER_DAY": "-1",
		"REBILL_VELOCITY_DECLINES_PER_DAY":     "five",
		"REBILL_ENCRYPTION_OLD_KEYS":           "c2hvcnQ=",
	} {
		_, err := load(map[string]string{name: value})
		require.ErrorContains(t, err, name)
	}
}
