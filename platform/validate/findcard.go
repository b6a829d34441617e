package validate

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
