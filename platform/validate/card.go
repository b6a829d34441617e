package validate

import (
	"slices"
	"strconv"
)

// LooksLikeCardNumber reports whether s contains something that could be a
// payment card number (PAN). rebill must never store or log a PAN, and a
// client that puts one into a description, a metadata value, an id or a
// header has made a mistake the API refuses rather than keeps.
//
// People paste card numbers in many shapes, and ordinary text is full of
// long digit strings, so the search is narrow on purpose:
//
//  1. s is normalised: percent-encoded bytes ("%20") and HTML character
//     references ("&#32;", "&#x20;", "&nbsp;") are decoded, so that text
//     pasted from a URL or a web page reads as it is shown; every Unicode
//     decimal digit (full-width, Arabic-Indic, Devanagari, mathematical...)
//     becomes its ASCII digit; zero-width and other invisible characters
//     (format characters, combining and enclosing marks, Hangul fillers)
//     are dropped; Unicode spaces become ' ', dashes '-', full-width ASCII
//     its ASCII form, any other letter a letter that is no hex digit.
//     UUIDs are then masked.
//  2. A candidate is either digit groups joined by one separator used
//     consistently (1 to maxSeparator characters, none a letter or digit:
//     ".", "/", "_", "  ", "\n", " - ", " -- ", "----") in a card layout,
//     4-4-4-4, 4-4-4-4-3, 4-6-5 or 4-6-4, the chain of groups being
//     exactly that long; or an unbroken run of exactly 13 to 19 digits. A
//     longer run (a payment UIN, a 20-digit bank account) is not a
//     candidate, nor is a longer chain (an account number in groups of
//     four). A run glued to letters ("card4242…", "…4242x") is a candidate
//     unless the glued token is a known identifier shape: a hex digest
//     (hex only, at least 32 characters) or a ULID ([isULID]). A run after
//     "+" of at most 15 digits is an E.164 phone number, and a run after a
//     dot that follows a digit is the fraction of a decimal number (the
//     integer part of "4111111111111111.5" is a candidate).
//  3. A candidate is refused only if it passes the Luhn check and its first
//     digits are in a card network's issuer range ([issuerRanges]). A random
//     digit string passes Luhn one time in ten, and the prefix test removes
//     most of the rest: dates, Unix times and years start with 1 or 20,
//     which no network issues.
//
// What remains is a trade-off the API documents: a 13-digit OGRN or any
// other 13..19-digit number that happens to pass Luhn and start like a card
// (about one in twenty such numbers that start with 4, 5 or 6) is refused.
func LooksLikeCardNumber(s string) bool {
	return scanCards(maskUUIDs(normalize(s)))
}

// normalize is step 1 of LooksLikeCardNumber. Invisible characters are
// dropped before escapes are decoded, so that one inside "%20" or
// "&nbsp;" hides nothing, and what the escapes decode to is normalised in
// turn.
func normalize(s string) string {
	t := normalizeDigits(s)
	if d := decodeEscapes(t); d != t {
		return normalizeDigits(d)
	}
	return t
}

// issuerRange is a range of the first four digits of card numbers that a
// network issues (ISO/IEC 7812 issuer identification numbers).
type issuerRange struct {
	lo, hi  int
	network string
}

// issuerRanges are the networks whose numbers are refused, by the first four
// digits. Overlaps are harmless (Maestro's 56–69 covers most of 6). Sources:
// the networks' published IIN ranges as collected in ISO/IEC 7812 registries
// (Visa, Mastercard incl. the 2-series, American Express, JCB, Discover,
// Diners Club, UnionPay, Maestro, NPCI RuPay), NSPK Mir 2200–2204, and the
// national schemes UzCard, Humo, Belkart, ArCa, Elcart and Troy.
var issuerRanges = []issuerRange{
	{4000, 4999, "Visa"},
	{5100, 5599, "Mastercard"}, {2221, 2720, "Mastercard"},
	{3400, 3499, "American Express"}, {3700, 3799, "American Express"},
	{2200, 2204, "Mir"},
	{6200, 6299, "UnionPay"}, {8100, 8199, "UnionPay"},
	{3528, 3589, "JCB"},
	{6011, 6011, "Discover"}, {6440, 6499, "Discover"}, {6500, 6599, "Discover"},
	{3600, 3699, "Diners Club"}, {3800, 3899, "Diners Club"}, {3000, 3059, "Diners Club"},
	{5000, 5099, "Maestro"}, {5600, 6999, "Maestro"},
	{6000, 6099, "RuPay"}, {8100, 8299, "RuPay"},
	{8600, 8600, "UzCard"},
	{9860, 9860, "Humo"},
	{9112, 9112, "Belkart"},
	{9051, 9051, "ArCa"},
	{9417, 9417, "Elcart"},
	{9792, 9792, "Troy"},
}

// cardLayouts are the groupings in which card numbers are printed and typed.
var cardLayouts = [][]int{{4, 4, 4, 4}, {4, 4, 4, 4, 3}, {4, 6, 5}, {4, 6, 4}}

// maxSeparator is the longest string, in bytes, accepted between two
// groups: "\r\n", a double space, " - ", " -- ", "\r\n\r\n", a row of
// dashes. A chain whose gaps differ is no card layout, so a longer bound
// adds only rows of exactly four 4-digit numbers spaced alike.
const maxSeparator = 8

// issued reports whether digits (at least 4) start in a network's range.
func issued(digits string) bool {
	prefix, _ := strconv.Atoi(digits[:4])
	for _, r := range issuerRanges {
		if r.lo <= prefix && prefix <= r.hi {
			return true
		}
	}
	return false
}

// span is one maximal run of digits, t[start:end].
type span struct{ start, end int }

func (s span) len() int { return s.end - s.start }

// chain is a sequence of digit groups joined by one separator. shared says
// that the first group also ends the chain before it (whose separator
// differed), so the chain is judged with and without it.
type chain struct {
	groups   [7]span
	n        int // groups in use; more than len(groups) means too long
	sep      string
	shared   bool
	overflow bool
}

func (c *chain) add(s span) {
	if c.n == len(c.groups) {
		c.overflow = true
		return
	}
	c.groups[c.n] = s
	c.n++
}

// scanCards looks for a candidate in t, which normalizeDigits produced.
func scanCards(t string) bool {
	var c chain
	var memo tokenMemo
	prev := span{-1, -1}
	for i := 0; i < len(t); {
		if !isDigit(t[i]) {
			i++
			continue
		}
		run := span{start: i}
		for i < len(t) && isDigit(t[i]) {
			i++
		}
		run.end = i
		if unbrokenCandidate(t, run, &memo) {
			return true
		}
		gap := ""
		if prev.end >= 0 {
			gap = t[prev.end:run.start]
		}
		switch {
		case prev.end >= 0 && isSeparator(gap) && (c.n == 1 || gap == c.sep):
			c.sep = gap
			c.add(run)
		case prev.end >= 0 && isSeparator(gap):
			if c.candidate(t) {
				return true
			}
			c = chain{sep: gap, shared: true}
			c.add(prev)
			c.add(run)
		default:
			if c.candidate(t) {
				return true
			}
			c = chain{}
			c.add(run)
		}
		prev = run
	}
	return c.candidate(t)
}

// isSeparator: 1..maxSeparator bytes, no letter or digit among them.
func isSeparator(gap string) bool {
	if gap == "" || len(gap) > maxSeparator {
		return false
	}
	for i := range len(gap) {
		if isLetter(gap[i]) || isDigit(gap[i]) {
			return false
		}
	}
	return true
}

// candidate judges a finished chain of at least three groups.
func (c *chain) candidate(t string) bool {
	if c.n < 3 || c.overflow {
		return false
	}
	groups := c.groups[:c.n]
	if groupedCard(t, groups) {
		return true
	}
	return c.shared && groupedCard(t, groups[1:])
}

func groupedCard(t string, groups []span) bool {
	if !slices.ContainsFunc(cardLayouts, func(layout []int) bool {
		return slices.EqualFunc(layout, groups, func(n int, g span) bool { return n == g.len() })
	}) {
		return false
	}
	first, last := groups[0], groups[len(groups)-1]
	if knownIdentifier(t, first) || knownIdentifier(t, last) {
		return false
	}
	var buf [19]byte
	digits := buf[:0]
	for _, g := range groups {
		digits = append(digits, t[g.start:g.end]...)
	}
	return luhn(digits) && issued(string(digits))
}

// tokenMemo keeps the last token knownIdentifier judged, so that the runs
// of one long token are not each measured against all of it.
type tokenMemo struct {
	start, end int
	known      bool
}

// unbrokenCandidate judges one run of digits on its own.
func unbrokenCandidate(t string, run span, memo *tokenMemo) bool {
	n := run.len()
	if n < 13 || n > 19 {
		return false
	}
	before := at(t, run.start-1)
	switch {
	case before == '+' && n <= 15: // E.164: at most 15 digits
		return false
	case before == '.' && isDigit(at(t, run.start-2)): // a decimal fraction
		return false
	case memo.start <= run.start && run.end <= memo.end:
		if memo.known {
			return false
		}
	default:
		start, end, known := identifierToken(t, run)
		*memo = tokenMemo{start: start, end: end, known: known}
		if known {
			return false
		}
	}
	digits := t[run.start:run.end]
	return luhn([]byte(digits)) && issued(digits)
}

// at returns s[i], or 0 outside s.
func at(s string, i int) byte {
	if i < 0 || i >= len(s) {
		return 0
	}
	return s[i]
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isAlnum(c byte) bool  { return isDigit(c) || isLetter(c) }
func isHex(c byte) bool    { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func luhn(digits []byte) bool {
	sum := 0
	for i := range digits {
		d := int(digits[len(digits)-1-i] - '0')
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}
