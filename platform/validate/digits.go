package validate

import (
	"html"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeEscapes decodes what a pasted text may carry encoded: every "%XX"
// (two hex digits) of URL encoding, then HTML's character references
// (html.UnescapeString: "&#32;", "&#x2D;", "&nbsp;", "&ndash;", ...). Other
// '%' and '&' stay as they are. s is returned as it is when it holds
// neither.
func decodeEscapes(s string) string {
	pct, amp := strings.IndexByte(s, '%') >= 0, strings.IndexByte(s, '&') >= 0
	if !pct && !amp {
		return s
	}
	if pct {
		b := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
				i += 2
				continue
			}
			b = append(b, s[i])
		}
		s = string(b)
	}
	return html.UnescapeString(s)
}

func unhex(c byte) byte {
	switch {
	case isDigit(c):
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// normalizeDigits returns s as scanCards reads it (see LooksLikeCardNumber,
// step 1). An ASCII s is returned as it is, without a copy.
func normalizeDigits(s string) string {
	ascii := true
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		// The general categories tested are disjoint, so the common ones
		// (letters) go first; the ranges above them take precedence.
		switch {
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		case '\uff01' <= r && r <= '\uff5e': // full-width ASCII, digits included
			b.WriteByte(byte(r - 0xfee0))
		case r == '\u115f' || r == '\u1160' || r == '\u3164' || r == '\uffa0': // Hangul fillers
		case r == '\u2028' || r == '\u2029':
			b.WriteByte('\n')
		case r == '\u2212': // minus sign
			b.WriteByte('-')
		case unicode.IsLetter(r):
			b.WriteByte('z')
		case unicode.Is(unicode.Nd, r):
			b.WriteByte('0' + decimalValue(r))
		case unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me):
		case unicode.Is(unicode.Zs, r):
			b.WriteByte(' ')
		case unicode.Is(unicode.Pd, r):
			b.WriteByte('-')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// decimalValue is the value of a Unicode decimal digit (category Nd). The
// standard encodes each script's digits as one contiguous run 0..9, and
// unicode.Nd's ranges are whole runs (a test checks it), so the value is
// the offset in the range modulo 10.
func decimalValue(r rune) byte {
	for _, rg := range unicode.Nd.R16 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10)
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10)
		}
	}
	return 0
}
