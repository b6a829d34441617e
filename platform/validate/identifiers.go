package validate

import (
	"strings"
)

// knownIdentifier reports whether the run of digits is glued to letters in
// a token that has a known identifier shape: a hex digest (a SHA or MD5
// sum, a trace id) or a ULID. A run not glued to letters is no part of an
// identifier.
func knownIdentifier(t string, run span) bool {
	_, _, known := identifierToken(t, run)
	return known
}

// identifierToken is knownIdentifier with the token's bounds (the run's
// own when it is not glued to letters).
func identifierToken(t string, run span) (start, end int, known bool) {
	start, end = run.start, run.end
	if !isLetter(at(t, start-1)) && !isLetter(at(t, end)) {
		return start, end, false
	}
	for start > 0 && isAlnum(t[start-1]) {
		start--
	}
	for end < len(t) && isAlnum(t[end]) {
		end++
	}
	token := t[start:end]
	return start, end, isDigest(token) || isULID(token)
}

// minDigest is the length of the shortest hex digest exempted: MD5 and a
// W3C trace id. Among random hex characters (ten digits in sixteen) a run
// of 13 digits is common, which is why digests need the exemption; a
// shorter hex token ("a4111…", "…1111f", "abc4111…") is a card number with
// a letter or three glued to it, and is not exempted.
const minDigest = 32

// isDigest: only hex digits, at least minDigest of them.
func isDigest(s string) bool {
	if len(s) < minDigest {
		return false
	}
	for i := range len(s) {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// ulidTimeLimit bounds the time a ULID's first 10 characters encode (48
// bits of Unix milliseconds): 2100-01-01. ULIDs are made at the time they
// are made, so their first characters are "00" to "03" this century; a
// token of the shape whose time lies further ahead ("4111111111111111"
// followed by ten capitals, year 6400) is a card number with letters glued
// to it.
const ulidTimeLimit = 4_102_444_800_000

// crockford maps an upper-case character of Crockford's base32 to its
// value, -1 for none (I, L, O and U are not used).
func crockford(c byte) int {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	return strings.IndexByte(alphabet, c)
}

// isULID reports whether s is a ULID as ULID generators make them (the
// spec: github.com/ulid/spec): 26 characters of Crockford's base32, either
// case, whose time, the first 10 characters, is before ulidTimeLimit.
func isULID(s string) bool {
	if len(s) != 26 {
		return false
	}
	var ms uint64
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		v := crockford(c)
		if v < 0 {
			return false
		}
		if i < 10 {
			ms = ms<<5 | uint64(v)
		}
	}
	return ms < ulidTimeLimit
}

const uuidLen = 36 // 8-4-4-4-12 hex digits

// maskUUIDs replaces every UUID in s with letters, which no digit run can
// cross or be glued to. It copies s only when there is a UUID in it.
func maskUUIDs(s string) string {
	if len(s) < uuidLen || strings.IndexByte(s, '-') < 0 {
		return s
	}
	var b []byte
	for i := 0; i+uuidLen <= len(s); i++ {
		if !isUUID(s[i : i+uuidLen]) {
			continue
		}
		if b == nil {
			b = []byte(s)
		}
		for j := i; j < i+uuidLen; j++ {
			b[j] = 'x'
		}
		i += uuidLen - 1
	}
	if b == nil {
		return s
	}
	return string(b)
}

func isUUID(s string) bool {
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	for i := range uuidLen {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}
