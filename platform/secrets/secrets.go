// Package secrets seals what rebill keeps secret at rest (webhook signing
// secrets, payment tokens) with AES-256-GCM under REBILL_ENCRYPTION_KEY,
// so that a database dump alone yields nothing usable.
//
// # Rotation
//
// Each ciphertext names its key, "<key id>:<base64 nonce||ciphertext>".
// A [Keyring] seals with its current key and opens with any of its keys,
// so a new key can be deployed with the old ones kept for reading
// (REBILL_ENCRYPTION_OLD_KEYS) while stored secrets are sealed again
// under the new one; [Keyring.Current] tells which rows are done.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of REBILL_ENCRYPTION_KEY: AES-256.
const KeySize = 32

// Keyring seals with its current key and opens with any of its keys.
type Keyring struct {
	current string
	keys    map[string]cipher.AEAD
	// fingerprint holds, per key id, a key derived from that key for
	// Fingerprint: an HMAC that finds equal secrets without opening them.
	fingerprint map[string][]byte
}

// ParseKey decodes a base64 key of KeySize bytes (standard or URL
// alphabet, padded or not).
func ParseKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(strings.TrimSpace(s)); err == nil {
			if len(key) != KeySize {
				return nil, fmt.Errorf("must be %d bytes, base64; got %d bytes", KeySize, len(key))
			}
			return key, nil
		}
	}
	return nil, errors.New("must be base64 (e.g. openssl rand -base64 32)")
}

// NewKey returns a random key, base64.
func NewKey() string {
	key := make([]byte, KeySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return base64.StdEncoding.EncodeToString(key)
}

// KeyID names a key without revealing it: the first 8 hex digits of its
// SHA-256.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return "k" + hex.EncodeToString(sum[:4])
}

// NewKeyring encrypts with key; older keys still decrypt.
func NewKeyring(key []byte, older ...[]byte) (*Keyring, error) {
	k := &Keyring{keys: map[string]cipher.AEAD{}, fingerprint: map[string][]byte{}}
	for i, raw := range append([][]byte{key}, older...) {
		if len(raw) != KeySize {
			return nil, fmt.Errorf("encryption key must be %d bytes", KeySize)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("encryption key: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("encryption key: %w", err)
		}
		id := KeyID(raw)
		if i == 0 {
			k.current = id
		}
		k.keys[id] = aead
		derived, err := hkdf.Key(sha256.New, raw, nil, "rebill fingerprint v1", sha256.Size)
		if err != nil {
			return nil, fmt.Errorf("derive fingerprint key: %w", err)
		}
		k.fingerprint[id] = derived
	}
	return k, nil
}

// Current is the id of the key that seals; a ciphertext not starting with
// it is to be sealed again.
func (k *Keyring) Current() string { return k.current }

// Fingerprint is HMAC-SHA256 of data under a key derived from the key
// keyID names (not the sealing key itself), for finding a secret given
// again without storing it in clear or opening every row. Returns nil for
// a key the ring does not have.
func (k *Keyring) Fingerprint(keyID string, data []byte) []byte {
	key, ok := k.fingerprint[keyID]
	if !ok {
		return nil
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(data)
	return mac.Sum(nil)
}

// Fingerprints are data's fingerprints under every key of the ring, the
// current one first: a secret sealed before a rotation still matches.
func (k *Keyring) Fingerprints(data []byte) [][]byte {
	out := [][]byte{k.Fingerprint(k.current, data)}
	for id := range k.fingerprint {
		if id != k.current {
			out = append(out, k.Fingerprint(id, data))
		}
	}
	return out
}

// Encrypt seals plain, bound to aad (the row's id: a ciphertext copied to
// another row does not decrypt).
func (k *Keyring) Encrypt(plain, aad []byte) string {
	aead := k.keys[k.current]
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, plain, aad)
	return k.current + ":" + base64.RawStdEncoding.EncodeToString(sealed)
}

// Decrypt opens what Encrypt sealed with aad.
func (k *Keyring) Decrypt(s string, aad []byte) ([]byte, error) {
	id, b64, ok := strings.Cut(s, ":")
	if !ok {
		return nil, errors.New("ciphertext without a key id")
	}
	aead, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("ciphertext under key %s, which this node does not have", id)
	}
	sealed, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil || len(sealed) < aead.NonceSize() {
		return nil, errors.New("malformed ciphertext")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("decrypt under key %s: %w", id, err)
	}
	return plain, nil
}
