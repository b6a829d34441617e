package validate

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// withCheckDigit appends the Luhn check digit to body.
func withCheckDigit(body string) string {
	for d := byte('0'); d <= '9'; d++ {
		if luhn([]byte(body + string(d))) {
			return body + string(d)
		}
	}
	panic("unreachable")
}

// testCards are valid-looking numbers of every network in issuerRanges, in
// every length the layouts use and a few more.
func testCards() []string {
	cards := []string{
		"4242424242424242", "4222222222222", "5555555555554444", "2223003122003222",
		"378282246310005", "36227206271667", "6011111111111117", "3566002020360505",
		"6200000000000005", "6221260000000000001",
	}
	for _, p := range []string{"2200", "2204", "8600", "9860", "9112", "9051", "9417", "9792", "8100", "8200",
		"6440", "6500", "3000", "3059", "3800", "5000", "5600", "6000", "3528", "3589", "2720"} {
		cards = append(cards, withCheckDigit(p+"00001234567"))    // 16
		cards = append(cards, withCheckDigit(p+"00001234567890")) // 19
	}
	return cards
}

// layoutFor is the printed grouping of an n-digit card, nil when none.
func layoutFor(n int) []int {
	switch n {
	case 14:
		return []int{4, 6, 4}
	case 15:
		return []int{4, 6, 5}
	case 16:
		return []int{4, 4, 4, 4}
	case 19:
		return []int{4, 4, 4, 4, 3}
	}
	return nil
}

func group(card string, layout []int, sep string) string {
	parts := make([]string, 0, len(layout))
	for _, n := range layout {
		parts = append(parts, card[:n])
		card = card[n:]
	}
	return strings.Join(parts, sep)
}

// digitsIn rewrites the ASCII digits of s in the script whose zero is zero.
func digitsIn(s string, zero rune) string {
	return strings.Map(func(r rune) rune {
		if '0' <= r && r <= '9' {
			return zero + r - '0'
		}
		return r
	}, s)
}

// between puts sep between every two characters of s.
func between(s, sep string) string { return strings.Join(strings.Split(s, ""), sep) }

// cardShapes are the ways a card number is pasted into a text field.
func cardShapes(card string) map[string]string {
	shapes := map[string]string{
		"plain":                                card,
		"in a sentence":                        "my card is " + card + ", thanks",
		"glued before":                         "card" + card,
		"glued after":                          card + "x",
		"glued to cyrillic":                    "карта" + card,
		"one hex letter glued after":           card + "a",
		"three hex letters glued before":       "abc" + card,
		"capitals glued up to a ulid's length": card + strings.Repeat("K", 26-len(card)),
		"integer part of a decimal":            card + ".5",
		"percent-encoded":                      percentEncode(card),
		"html references":                      htmlReferences(card),
		"after underscore":                     "tok_" + card,
		"after a colon":                        "PAN:" + card,
		"negative":                             "-" + card,
		"full-width":                           digitsIn(card, '０'),
		"arabic-indic":                         digitsIn(card, '٠'),
		"extended arabic":                      digitsIn(card, '۰'),
		"devanagari":                           digitsIn(card, '०'),
		"bengali":                              digitsIn(card, '০'),
		"thai":                                 digitsIn(card, '๐'),
		"math bold":                            digitsIn(card, '𝟎'),
		"math monospace":                       digitsIn(card, '𝟶'),
	}
	for name, zw := range map[string]string{"zwsp": "\u200b", "zwnj": "\u200c", "zwj": "\u200d", "word joiner": "\u2060",
		"bom": "\ufeff", "soft hyphen": "\u00ad", "lrm": "\u200e", "combining grapheme joiner": "\u034f"} {
		shapes["zero-width "+name] = between(card, zw)
	}
	layout := layoutFor(len(card))
	if layout == nil {
		return shapes
	}
	for name, sep := range map[string]string{"space": " ", "dash": "-", "dot": ".", "slash": "/", "underscore": "_",
		"double space": "  ", "newline": "\n", "crlf": "\r\n", "tab": "\t", "spaced dash": " - ", "comma": ",",
		"no-break space": "\u00a0", "thin space": "\u2009", "en dash": "\u2013", "full-width dot": "．",
		"ideographic space": "\u3000", "line separator": "\u2028", "spaced double dash": " -- ", "row of dashes": "----",
		"blank line": "\r\n\r\n"} {
		g := group(card, layout, sep)
		shapes["grouped by "+name] = g
		shapes["grouped by "+name+" in a sentence"] = "paid with " + g + " yesterday"
		shapes["grouped by "+name+" after a date"] = "2026-12-01 " + g
		shapes["grouped by "+name+", full-width"] = digitsIn(g, '０')
		shapes["grouped by "+name+", zero-width inside groups"] = between(g, "\u200b")
	}
	// Separators as a URL or a web page encodes them.
	for name, sep := range map[string]string{"percent-encoded space": "%20", "percent-encoded no-break space": "%C2%A0",
		"percent-encoded dash": "%2d", "html decimal space": "&#32;", "html hex space": "&#x20;", "html nbsp": "&nbsp;",
		"html ndash": " &ndash; "} {
		g := group(card, layout, sep)
		shapes["grouped by "+name] = g
		shapes["grouped by "+name+" in a sentence"] = "paid with " + g + " yesterday"
	}
	return shapes
}

// percentEncode writes every byte of s as %XX.
func percentEncode(s string) string {
	var b strings.Builder
	for i := range len(s) {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// htmlReferences writes every other character of s as an HTML character
// reference, decimal and hexadecimal in turn.
func htmlReferences(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "&#%d;", r)
		case 2:
			fmt.Fprintf(&b, "&#x%x;", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestCardShapesAreCaught: every network's numbers in every shape people
// paste them.
func TestCardShapesAreCaught(t *testing.T) {
	t.Parallel()
	tried := 0
	for _, card := range testCards() {
		require.True(t, luhn([]byte(card)) && issued(card), card)
		for name, s := range cardShapes(card) {
			tried++
			if !LooksLikeCardNumber(s) {
				t.Errorf("%s: %s not caught: %q", card, name, s)
			}
			field, found := FindCardNumber([]byte(`{"metadata":{"note":` + strconv.Quote(s) + `}}`))
			if !found || field != "metadata.note" {
				t.Errorf("%s: %s not found in a body: %q %v", card, name, field, found)
			}
		}
	}
	t.Logf("%d card shapes caught", tried)
}

// ordinaryInputs makes n inputs of each kind that must never be refused,
// from a fixed seed.
func ordinaryInputs(rng *rand.Rand) map[string]func() string {
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	randTime := func() time.Time {
		return epoch.Add(time.Duration(rng.Int64N(int64(100 * 365 * 24 * time.Hour))))
	}
	// Unix times in milli-, micro- and nanoseconds start with 1 from
	// 2001-09-09 to 2033-05-18, the span they are drawn from; from 2039
	// they start like Mir and Mastercard numbers (the documented
	// trade-off).
	unixStart, unixEnd := time.UnixMilli(1_000_000_000_000), time.UnixMilli(2_000_000_000_000)
	randUnixTime := func() time.Time {
		return unixStart.Add(time.Duration(rng.Int64N(int64(unixEnd.Sub(unixStart)))))
	}
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	countryCodes := []string{"1", "7", "33", "44", "49", "86", "91", "61", "81", "55", "380", "375", "998", "971", "852"}
	return map[string]func() string{
		"uuid v4": func() string {
			var u uuid.UUID
			copy(u[:], randBytes(16))
			u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
			return u.String()
		},
		"uuid v7": func() string {
			var u uuid.UUID
			copy(u[:], randBytes(16))
			ms := uint64(randTime().UnixMilli())
			for i := range 6 {
				u[i] = byte(ms >> (40 - 8*i))
			}
			u[6], u[8] = u[6]&0x0f|0x70, u[8]&0x3f|0x80
			return u.String()
		},
		"ulid": func() string {
			b := make([]byte, 26)
			ms := uint64(randTime().UnixMilli())
			for i := 9; i >= 0; i-- {
				b[i] = crockford[ms&31]
				ms >>= 5
			}
			for i := 10; i < 26; i++ {
				b[i] = crockford[rng.IntN(32)]
			}
			return string(b)
		},
		"sha-1 hex":     func() string { return hex.EncodeToString(randBytes(20)) },
		"sha-256 hex":   func() string { return hex.EncodeToString(randBytes(32)) },
		"sha-256 upper": func() string { return strings.ToUpper(hex.EncodeToString(randBytes(32))) },
		"base64url token": func() string {
			return base64.RawURLEncoding.EncodeToString(randBytes(16 + rng.IntN(33)))
		},
		"iso date and time": func() string {
			tm := randTime().In(time.FixedZone("", (rng.IntN(27)-12)*3600))
			switch rng.IntN(7) {
			case 0:
				return tm.Format(time.DateOnly)
			case 1:
				return tm.Format(time.RFC3339)
			case 2:
				return tm.Format(time.RFC3339Nano)
			case 3:
				return tm.Format("20060102T150405Z0700")
			case 4:
				return strconv.FormatInt(randUnixTime().UnixMilli(), 10)
			case 5:
				return strconv.FormatInt(randUnixTime().UnixMicro(), 10)
			default:
				return strconv.FormatInt(randUnixTime().UnixNano(), 10)
			}
		},
		"e.164 phone": func() string {
			cc := countryCodes[rng.IntN(len(countryCodes))]
			return "+" + cc + digits(8+rng.IntN(15-len(cc)-8+1))
		},
		"russian phone": func() string {
			code, a, b, c := digits(3), digits(3), digits(2), digits(2)
			switch rng.IntN(6) {
			case 0:
				return fmt.Sprintf("+7 (%s) %s-%s-%s", code, a, b, c)
			case 1:
				return fmt.Sprintf("8 (%s) %s-%s-%s", code, a, b, c)
			case 2:
				return fmt.Sprintf("8-%s-%s-%s-%s", code, a, b, c)
			case 3:
				return fmt.Sprintf("+7 %s %s %s %s", code, a, b, c)
			case 4:
				return "+7" + code + a + b + c
			default:
				return "8" + code + a + b + c
			}
		},
		"url-encoded order number": func() string {
			day := randTime().Format("20060102")
			return "INV%2F" + day[:4] + "%2F" + day[4:6] + "%2F" + digits(6) + "%20" + digits(2)
		},
		"html-escaped description": func() string {
			day := randTime().Format("20060102")
			return "Gym &amp; spa&nbsp;&#8470;&nbsp;" + day + "-" + digits(6) + "&#x2d;" + digits(2) + " &mdash; " + digits(4) + "&nbsp;&#8381;"
		},
		"order number": func() string {
			day := randTime().Format("20060102")
			seq, check := digits(6), digits(2)
			switch rng.IntN(6) {
			case 0:
				return "order " + day + "-" + seq + "-" + check
			case 1:
				return day[:4] + "." + day[4:6] + "." + day[6:] + "." + seq
			case 2:
				return "INV/" + day[:4] + "/" + day[4:6] + "/" + seq
			case 3:
				return "ORD-" + day + "-" + seq + "." + check
			case 4:
				return "#" + digits(6+rng.IntN(5))
			default:
				return day + seq + check // 16 digits, starting with 20
			}
		},
	}
}

// TestOrdinaryTextIsNotRefused: 1.3 million inputs (100,000 of each kind)
// that integrations put in ids, descriptions and metadata, none refused.
func TestOrdinaryTextIsNotRefused(t *testing.T) {
	t.Parallel()
	n := 100_000
	if testing.Short() {
		n = 5_000
	}
	rng := rand.New(rand.NewPCG(19, 3))
	kinds := ordinaryInputs(rng)
	start := time.Now()
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		next := kinds[name]
		for range n {
			if s := next(); LooksLikeCardNumber(s) {
				t.Fatalf("%s refused: %q", name, s)
			}
		}
	}
	t.Logf("%d ordinary inputs (%d kinds × %d) in %s", n*len(kinds), len(kinds), n, time.Since(start))
}
