package validate

import (
	"bytes"
	"encoding/json"
	"html"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// mayHoldCardNumber reports whether body may hold a candidate in any of its
// tokens. A candidate needs at least 13 digits with no letter between them
// and at most maxSeparator other characters between two of them; a
// backslash, '%' or '&' may hide digits and separators behind escapes, and
// a byte beyond ASCII may be a digit of another script or an invisible
// character. Without any of these no token can be flagged. Most bodies skip the token-by-token
// search, which costs as much as decoding the body.
func mayHoldCardNumber(body []byte) bool {
	digits, gap := 0, 0
	for _, c := range body {
		switch {
		case c == '\\' || c == '%' || c == '&' || c >= utf8.RuneSelf:
			return true
		case isDigit(c):
			if digits++; digits >= 13 {
				return true
			}
			gap = 0
		case isLetter(c):
			digits, gap = 0, 0
		default:
			if gap++; gap > maxSeparator {
				digits = 0
			}
		}
	}
	return false
}

// FindCardNumber looks for a card number anywhere in a raw JSON document:
// in every string value, every object key and every number, at any depth.
// It reads the raw body rather than a decoded struct so that a PAN in a
// field the target type would drop, or in a key, is still caught.
//
// field is the dotted path of the first hit ("metadata.note",
// "items[2]"), "" for the top level. When the card number is an object key,
// field is the path of the object holding it, so the number itself never
// appears in an error or a log. A body that is not valid JSON is searched
// as plain text, with field "".
func FindCardNumber(body []byte) (field string, found bool) {
	if !mayHoldCardNumber(body) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()

	type frame struct {
		array   bool
		key     string // object: the key whose value comes next
		haveKey bool   // object: key read, value not yet
		index   int    // array: index of the current element
	}
	var stack []frame
	path := func(frames []frame) string {
		var b strings.Builder
		for _, f := range frames {
			if f.array {
				b.WriteByte('[')
				b.WriteString(strconv.Itoa(f.index))
				b.WriteByte(']')
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		}
		return b.String()
	}
	// valueDone moves the innermost container past the value just read.
	valueDone := func() {
		if n := len(stack); n > 0 && !stack[n-1].array {
			stack[n-1].haveKey = false
		}
	}

	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return "", false
		}
		if err != nil {
			return "", LooksLikeCardNumber(string(body))
		}
		n := len(stack)
		if n > 0 && !stack[n-1].array && !stack[n-1].haveKey {
			// An object's key, or its end.
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			key, _ := tok.(string)
			if LooksLikeCardNumber(key) {
				return path(stack[:n-1]), true
			}
			stack[n-1].key, stack[n-1].haveKey = key, true
			continue
		}
		if n > 0 && stack[n-1].array {
			if tok == json.Delim(']') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			stack[n-1].index++
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, frame{})
			case '[':
				stack = append(stack, frame{array: true, index: -1})
			}
			continue
		case string:
			if LooksLikeCardNumber(tok) {
				return path(stack), true
			}
		case json.Number:
			if LooksLikeCardNumber(string(tok)) {
				return path(stack), true
			}
		}
		valueDone()
	}
}

// FindCardNumberInQuery looks for a card number in a request's query
// parameters, names and values. field is the name of the first parameter
// (in name order) whose value looks like one, or "query" when a name does,
// so that the number is never echoed.
func FindCardNumberInQuery(q url.Values) (field string, found bool) {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if LooksLikeCardNumber(name) {
			return "query", true
		}
		for _, v := range q[name] {
			if LooksLikeCardNumber(v) {
				return name, true
			}
		}
	}
	return "", false
}
