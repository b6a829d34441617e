package validate

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
)

// LooksLikeCardNumber reports whether s contains something that could be a
// payment card number (PAN). rebill must never store or log a PAN, and a
// client that puts one into a description or metadata has made a mistake
// the API refuses rather than keeps.
//
// A candidate is a maximal run of 13 to 19 digits, in which single spaces or
// dashes may separate groups of digits ("4242 4242 4242 4242"), that passes
// the Luhn check. Runs longer than 19 digits are not card numbers. To keep
// false positives (a refused, legitimate request) rare, these are not
// candidates either:
//
//   - runs starting with 0: ISO/IEC 7812 assigns no payment cards there,
//     while zero-padded order numbers are common;
//   - runs glued to an ASCII letter ("a1234…", "…1234e5"): they belong to
//     an identifier, a hex digest or a float's exponent; one random
//     SHA-256 hex string in a hundred would otherwise be refused;
//   - runs joined by a dot to more digits: the parts of a decimal number
//     such as 55.75582600000001;
//   - UUIDs, whose dash-separated groups can be all digits.
//
// Luhn passes for one random number in ten, so a 13-digit Unix millisecond
// time or a 16-digit microsecond time can still be flagged.
func LooksLikeCardNumber(s string) bool {
	s = maskUUIDs(s)
	var digits [19]byte
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		start, n := i, 0
		for {
			for i < len(s) && isDigit(s[i]) {
				if n < len(digits) {
					digits[n] = s[i]
				}
				n++
				i++
			}
			if i+1 < len(s) && (s[i] == ' ' || s[i] == '-') && isDigit(s[i+1]) {
				i++
				continue
			}
			break
		}
		if n < 13 || n > 19 || digits[0] == '0' {
			continue
		}
		if isLetter(at(s, start-1)) || isLetter(at(s, i)) {
			continue
		}
		if (at(s, start-1) == '.' && isDigit(at(s, start-2))) || (at(s, i) == '.' && isDigit(at(s, i+1))) {
			continue
		}
		if luhn(digits[:n]) {
			return true
		}
	}
	return false
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

const uuidLen = 36 // 8-4-4-4-12 hex digits

// maskUUIDs replaces every UUID in s with letters, which no digit run can
// cross or be glued to. It copies s only when there is a UUID in it.
func maskUUIDs(s string) string {
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

// mayHoldCardNumber reports whether body has what LooksLikeCardNumber
// needs in any of its tokens: a run of 13 digits or more (single spaces or
// dashes may separate them), or a backslash, behind whose escapes a string
// may hide digits. A decoded token holds no digit run that its raw bytes
// lack, so without either no token can be flagged. Most bodies have
// neither, and skip the token-by-token search, which costs as much as
// decoding the body.
func mayHoldCardNumber(body []byte) bool {
	if bytes.IndexByte(body, '\\') >= 0 {
		return true
	}
	run := 0
	for i, c := range body {
		switch {
		case isDigit(c):
			if run++; run >= 13 {
				return true
			}
		case (c == ' ' || c == '-') && run > 0 && i+1 < len(body) && isDigit(body[i+1]):
			// a separator inside a run
		default:
			run = 0
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
