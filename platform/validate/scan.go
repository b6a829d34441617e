package validate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/rebill/rebill/rebilltype"
)

// maxFieldErrors keeps the problem document small when a body holds NUL
// everywhere; the client fixes the first ones and retries.
const maxFieldErrors = 20

// The messages for NUL, which PostgreSQL refuses in text: a string holding
// it would fail in the database as a 500 instead of here as a 400. A key
// holding it, or another refused character, is reported on its object,
// since its path would carry the character.
const (
	msgNUL    = `must not contain the NUL character (\u0000)`
	msgNULKey = `keys must not contain the NUL character (\u0000)`
)

// textMessage is the message for a string, or an object key, holding r,
// which ForbiddenInText refuses.
func textMessage(r rune, key bool) string {
	switch {
	case r == 0 && key:
		return msgNULKey
	case r == 0:
		return msgNUL
	case key:
		return "keys " + TextMessage(r)
	}
	return TextMessage(r)
}

// scan reads body once as tokens before it is decoded. A syntax error
// (duplicate keys, invalid UTF-8 and trailing data included) is returned
// alone, since errors about the fields of a body that is not JSON would
// only confuse; otherwise every string and key holding a character that
// ForbiddenInText refuses (NUL included) is listed, json v2 not refusing
// them. They are found wherever they sit, also in values of types that
// decode themselves, such as time.Time.
func scan(body []byte) []rebilltype.FieldError {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	var errs []rebilltype.FieldError
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return syntaxError(dec, err)
		}
		if tok.Kind() == '"' && len(errs) < maxFieldErrors {
			if r, bad := ForbiddenInText(tok.String()); bad {
				ptr := dec.StackPointer()
				key := false
				if kind, n := dec.StackIndex(dec.StackDepth()); kind == '{' && n%2 == 1 {
					ptr, key = ptr.Parent(), true // an object key
				}
				errs = append(errs, rebilltype.FieldError{Field: dotted(dec, ptr), Message: textMessage(r, key)})
			}
		}
		if dec.StackDepth() == 0 {
			break
		}
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return []rebilltype.FieldError{{Field: "", Message: "unexpected data after the JSON object"}}
	}
	return errs
}

func syntaxError(dec *jsontext.Decoder, err error) []rebilltype.FieldError {
	var se *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && se.Err == jsontext.ErrDuplicateName:
		return []rebilltype.FieldError{{Field: dotted(dec, se.JSONPointer), Message: "duplicate key"}}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return []rebilltype.FieldError{{Field: "", Message: "invalid JSON: unexpected end of body"}}
	case errors.As(err, &se):
		// The library's own wording without its pointer, which may repeat
		// a key. It quotes the offending character, or a whole escape
		// sequence, which can run into the value: that one is left out.
		msg := se.Err.Error()
		if strings.HasSuffix(msg, " in string") && strings.ContainsAny(msg, "`\"") {
			msg = "invalid escape sequence in a string"
		}
		return []rebilltype.FieldError{{Field: "", Message: fmt.Sprintf("invalid JSON at offset %d: %s", se.ByteOffset, msg)}}
	}
	return []rebilltype.FieldError{{Field: "", Message: "invalid JSON"}}
}

// fieldAt names the value at ptr in body, which scan has read without error:
// it reads body again up to that value, so that dotted can see its parents.
func fieldAt(body []byte, ptr jsontext.Pointer) string {
	depth := strings.Count(string(ptr), "/")
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		if _, err := dec.ReadToken(); err != nil {
			return dotted(nil, ptr)
		}
		// A key or scalar at ptr leaves its parent on top of the stack; an
		// object or array at ptr has just been pushed.
		if d := dec.StackDepth(); (d == depth || d == depth+1) && dec.StackPointer() == ptr {
			return dotted(dec, ptr)
		}
	}
}

// dotted spells a JSON Pointer the way the API names fields:
// /payment_method/exp_month is "payment_method.exp_month", /metadata/a~1b is
// "metadata.a/b" and /items/0/id is "items[0].id". A pointer cannot tell an
// array index from a key made of digits, so the kinds of its parents are
// read from dec, which must be inside the value ptr names (nil: keys only).
func dotted(dec *jsontext.Decoder, ptr jsontext.Pointer) string {
	var b strings.Builder
	depth := 0
	for tok := range ptr.Tokens() {
		depth++
		var kind jsontext.Kind
		if dec != nil && depth <= dec.StackDepth() {
			kind, _ = dec.StackIndex(depth)
		}
		switch {
		case kind == '[':
			b.WriteString("[" + tok + "]")
		case b.Len() > 0:
			b.WriteString("." + tok)
		default:
			b.WriteString(tok)
		}
	}
	return b.String()
}
