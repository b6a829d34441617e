package secrets_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/secrets"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, secrets.KeySize) }

func TestKeyringRotation(t *testing.T) {
	t.Parallel()
	oldRing, err := secrets.NewKeyring(key(1))
	require.NoError(t, err)
	sealed := oldRing.Encrypt([]byte("whsec_x"), []byte("row-1"))
	require.True(t, len(sealed) > 10 && sealed[:len(oldRing.Current())+1] == oldRing.Current()+":")

	both, err := secrets.NewKeyring(key(2), key(1))
	require.NoError(t, err)
	require.Equal(t, secrets.KeyID(key(2)), both.Current())
	plain, err := both.Decrypt(sealed, []byte("row-1"))
	require.NoError(t, err)
	require.Equal(t, "whsec_x", string(plain))
	_, err = both.Decrypt(sealed, []byte("row-2"))
	require.Error(t, err, "bound to its row")

	newOnly, err := secrets.NewKeyring(key(2))
	require.NoError(t, err)
	_, err = newOnly.Decrypt(sealed, []byte("row-1"))
	require.ErrorContains(t, err, secrets.KeyID(key(1)), "names the missing key")
}

func TestFingerprints(t *testing.T) {
	t.Parallel()
	both, err := secrets.NewKeyring(key(2), key(1))
	require.NoError(t, err)
	oldRing, err := secrets.NewKeyring(key(1))
	require.NoError(t, err)
	data := []byte("sim1\x00tok_ok")
	fps := both.Fingerprints(data)
	require.Len(t, fps, 2)
	require.Equal(t, both.Fingerprint(both.Current(), data), fps[0], "the current key's first")
	require.Equal(t, oldRing.Fingerprint(oldRing.Current(), data), fps[1], "a fingerprint made before the rotation matches")
	require.NotEqual(t, fps[0], fps[1])
	require.NotEqual(t, fps[0], both.Fingerprint(both.Current(), []byte("sim1\x00tok_other")))
	require.Nil(t, both.Fingerprint("k00000000", data))
}
