package validate

import (
	"fmt"
	"unicode/utf8"
)

// ForbiddenInText returns the first character of s that no text the API
// stores may hold, and whether there is one. Stored text is shown again on
// support screens, in exports, terminals and e-mails, where these characters
// do harm rather than carry meaning:
//
//   - C0 controls other than tab, line feed and carriage return, DEL and the
//     C1 controls (U+0080..U+009F): ESC and CSI start terminal escape
//     sequences, BEL rings, NEL breaks lines where no one expects it;
//   - U+2028 and U+2029, line and paragraph separators that break
//     JavaScript string literals and log lines;
//   - noncharacters (U+FDD0..U+FDEF and the last two code points of every
//     plane, U+FFFE and U+FFFF included), which Unicode reserves for
//     internal use and never for interchange;
//   - the bidirectional embeddings, overrides and isolates U+202A..U+202E
//     and U+2066..U+2069, which reorder what follows them on screen, the
//     classic way to make "gpj.exe" read "exe.jpg" (CVE-2021-42574,
//     "Trojan Source").
//
// Other format characters stay allowed: the zero-width joiner of emoji
// sequences, the zero-width non-joiner of Persian, the marks LRM and RLM
// that Hebrew and Arabic text needs, the soft hyphen. NUL, which
// PostgreSQL cannot store, is among the C0 controls.
func ForbiddenInText(s string) (rune, bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
				return rune(c), true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if forbiddenRune(r) {
			return r, true
		}
		i += size
	}
	return 0, false
}

func forbiddenRune(r rune) bool {
	switch {
	case 0x80 <= r && r <= 0x9f, r == '\u2028', r == '\u2029':
		return true
	case 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069:
		return true
	case 0xfdd0 <= r && r <= 0xfdef, r&0xfffe == 0xfffe:
		return true
	}
	return false
}

// ForbiddenInID is ForbiddenInText for identifiers (customer ids, bill ids,
// tokens, keys), which hold no line breaks or tabs either.
func ForbiddenInID(s string) (rune, bool) {
	for _, r := range s {
		if r == '\t' || r == '\n' || r == '\r' {
			return r, true
		}
	}
	return ForbiddenInText(s)
}

// TextMessage says which character a field may not hold, by its code point
// only: the rest of the value is never echoed.
func TextMessage(r rune) string {
	return fmt.Sprintf("must not contain U+%04X: control characters (other than tab, line feed and carriage return), "+
		"line and paragraph separators, noncharacters and bidirectional overrides and isolates are refused", r)
}
