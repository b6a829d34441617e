package validate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rebill/rebill/rebilltype"
)

// Idempotency-Key errors. Both are 400: a POST without a usable key cannot
// be retried safely, so it is refused before anything is written.
var (
	ErrIdempotencyKeyMissing = errors.New("the Idempotency-Key header is required")
	ErrIdempotencyKeyInvalid = errors.New("invalid Idempotency-Key header")
)

// MaxIdempotencyKeyLen is the longest key, counted after unquoting.
const MaxIdempotencyKeyLen = 255

// IdempotencyKey returns the key from the Idempotency-Key header values
// (http.Header.Values). The key is what a retried request is matched by, so
// two spellings of one key must give the same string, and one request must
// not carry two candidate keys:
//
//   - no value: [ErrIdempotencyKeyMissing];
//   - more than one value: the header was sent twice, and picking one would
//     be a guess, so [ErrIdempotencyKeyInvalid];
//   - a value starting with '"' is a structured-field string (RFC 8941)
//     and is unquoted, so "abc" and abc are the same key;
//   - the key must be 1..255 printable ASCII characters (0x20..0x7E), not
//     only spaces (a quoted key may hold them); it is case-sensitive and
//     returned exactly as sent.
//
// Whitespace around the value is not part of it (RFC 9110, section 5.5);
// HTTP servers already strip it, and tests that build values by hand get
// the same answer. Errors never repeat the value.
func IdempotencyKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrIdempotencyKeyMissing
	case 1:
	default:
		return "", fmt.Errorf("%w: sent twice", ErrIdempotencyKeyInvalid)
	}
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		s, err := unquoteSFString(v)
		if err != nil {
			return "", err
		}
		v = s
	}
	switch {
	case v == "":
		return "", fmt.Errorf("%w: empty", ErrIdempotencyKeyInvalid)
	case len(v) > MaxIdempotencyKeyLen:
		return "", fmt.Errorf("%w: longer than %d characters", ErrIdempotencyKeyInvalid, MaxIdempotencyKeyLen)
	case !rebilltype.HasVisible(v):
		return "", fmt.Errorf("%w: only spaces", ErrIdempotencyKeyInvalid)
	}
	for i := range len(v) {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", fmt.Errorf("%w: only printable ASCII characters are allowed", ErrIdempotencyKeyInvalid)
		}
	}
	return v, nil
}

// unquoteSFString parses an RFC 8941 sf-string: DQUOTE *chr DQUOTE, where
// chr is printable ASCII other than '"' and '\', or the escapes \" and \\.
// Parameters (";a=1") and anything else after the closing quote are
// refused: the header carries a bare key.
func unquoteSFString(v string) (string, error) {
	if len(v) > 2*MaxIdempotencyKeyLen+2 {
		// Even with every character escaped, the key would be too long.
		return "", fmt.Errorf("%w: longer than %d characters", ErrIdempotencyKeyInvalid, MaxIdempotencyKeyLen)
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf(`%w: in a quoted key, '\' may only escape '"' or '\'`, ErrIdempotencyKeyInvalid)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: unexpected characters after the closing quote", ErrIdempotencyKeyInvalid)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: only printable ASCII characters are allowed", ErrIdempotencyKeyInvalid)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: missing closing quote", ErrIdempotencyKeyInvalid)
}
