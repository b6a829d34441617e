package rebilltype

import "unicode"

// PrintableASCII reports whether s holds only printable ASCII characters
// (identifiers and tokens that travel in logs and headers).
func PrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// HasVisible reports whether s holds a character that shows: an identifier
// made only of spaces, or of invisible format characters, looks empty in
// every list and cannot be told from another.
func HasVisible(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.In(r, unicode.Cf, unicode.Zs, unicode.Mn, unicode.Me, unicode.Cc) &&
			r != '\u115f' && r != '\u1160' && r != '\u3164' && r != '\uffa0' {
			return true
		}
	}
	return false
}
