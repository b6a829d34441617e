package validate

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxBodyBytes caps a request body. Every request the API accepts fits in a
// few kilobytes, so anything larger is a mistake or an attack, and refusing
// it early bounds the memory and CPU one request can take.
const MaxBodyBytes = 64 << 10

// ErrBodyTooLarge is returned when a body is over [MaxBodyBytes]; the HTTP
// layer answers 413.
var ErrBodyTooLarge = errors.New("request body is larger than 64 KiB")

const (
	// maxDepth bounds nesting so that a hostile body cannot make the
	// checks recurse without limit; real requests nest three levels.
	maxDepth = 64
	// maxFieldErrors keeps the problem document small when a body is wrong
	// everywhere; the client fixes the first ones and retries.
	maxFieldErrors = 20
)

// The messages for NUL, which PostgreSQL refuses in text: a string holding
// it would fail in the database as a 500 instead of here as a 400. A key
// holding it is reported on its object, since its path would carry the NUL.
const (
	msgNUL    = `must not contain the NUL character (\u0000)`
	msgNULKey = `keys must not contain the NUL character (\u0000)`
)

// FieldError is one entry of the problem document's `errors` list, so a
// client can point at the exact input it has to fix.
type FieldError struct {
	// Field is the dotted JSON path ("payment_method.exp_month",
	// "metadata.k", "items[0].id"), or "" when the body as a whole is wrong.
	Field string `json:"field"`
	// Message says what is wrong without repeating the submitted value.
	Message string `json:"message"`
}

// DecodeError means the body is not acceptable JSON for the target type; the
// HTTP layer answers 400 with Errors as the field-level list.
type DecodeError struct {
	Errors []FieldError
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("invalid request body")
	for i, fe := range e.Errors {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if fe.Field != "" {
			b.WriteString(fe.Field)
			b.WriteString(": ")
		}
		b.WriteString(fe.Message)
	}
	return b.String()
}

// ReadBody reads a whole request body, refusing it with [ErrBodyTooLarge]
// once it passes [MaxBodyBytes], so an oversized body is never buffered in
// full. It reads one byte past the limit to tell "exactly the limit" from
// "over it".
func ReadBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	if len(b) > MaxBodyBytes {
		return nil, ErrBodyTooLarge
	}
	return b, nil
}

// Decode decodes body, which must be a single JSON object, into dst, a
// non-nil pointer. It is stricter than encoding/json because a lenient
// reading of a payment request silently charges something the client did not
// mean:
//
//   - an empty body is read as {} (POSTs whose fields are all optional);
//   - unknown fields are refused at every level, and keys match struct
//     field names exactly (encoding/json would let "Amount" set "amount");
//   - a key repeated in one object is refused, since which value wins is a
//     guess, and request fingerprints would disagree with what was applied;
//   - integer fields take only integer literals: 49900.0 and 4.99e4 are
//     refused rather than rounded or truncated;
//   - no string or object key may hold NUL (\u0000), which PostgreSQL
//     cannot store;
//   - anything after the object, and bodies that are not UTF-8, are refused.
//
// null leaves a field at its zero value; callers check required fields.
//
// The error is a [*DecodeError] naming every field at fault (up to 20), or
// [ErrBodyTooLarge]. Any other error means dst is not a non-nil pointer,
// which is a bug in the caller. When an error is returned, dst may have
// been partly written and must not be used.
func Decode(body []byte, dst any) error {
	if len(body) > MaxBodyBytes {
		return ErrBodyTooLarge
	}
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("validate.Decode: dst must be a non-nil pointer, got %T", dst)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		body, trimmed = []byte("{}"), []byte("{}")
	}
	if !utf8.Valid(body) {
		return bodyError("body is not valid UTF-8")
	}
	if trimmed[0] != '{' {
		return bodyError("body must be a JSON object")
	}

	// First pass: walk the tokens alongside dst's type, collecting every
	// problem with its path. encoding/json stops at the first type error,
	// names no path for unknown fields, and checks neither duplicates nor
	// integer literals, so it cannot produce the field-level list alone.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := &walker{body: body, dec: dec}
	if err := w.value(rv.Type().Elem(), ""); err == nil {
		if _, err := dec.Token(); err != io.EOF {
			w.fatal("unexpected data after the JSON object")
		}
	}
	if len(w.errs) > 0 {
		return &DecodeError{Errors: w.errs}
	}

	// Second pass: the real decode. The walk above already refuses all the
	// walker knows about; DisallowUnknownFields stays as a backstop for
	// shapes the walker cannot see, such as values behind interfaces.
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fromJSONError(err)
	}
	return nil
}

func bodyError(msg string) *DecodeError {
	return &DecodeError{Errors: []FieldError{{Field: "", Message: msg}}}
}

// errStop ends the walk; the reason is already in walker.errs.
var errStop = errors.New("stop")

// walker checks a token stream against a Go type. A nil type means "any
// JSON is fine here": it is used below unknown fields and wrong-kind values,
// where only syntax, depth and duplicate keys are still checked.
type walker struct {
	body  []byte // for error messages only
	dec   *json.Decoder
	errs  []FieldError
	depth int
}

func (w *walker) add(field, msg string) error {
	if len(w.errs) >= maxFieldErrors {
		return errStop
	}
	w.errs = append(w.errs, FieldError{Field: field, Message: msg})
	if len(w.errs) >= maxFieldErrors {
		return errStop
	}
	return nil
}

// fatal replaces field-level findings with one body-level error: when the
// body is not JSON at all, errors about its fields would only confuse.
func (w *walker) fatal(msg string) error {
	w.errs = []FieldError{{Field: "", Message: msg}}
	return errStop
}

// syntax reports a body that is not JSON. The decoder's own SyntaxError is
// not used: after Token its offsets are relative to the last value read and
// its messages lack context, so the whole body is scanned again for the
// first error, as json.Unmarshal would report it.
func (w *walker) syntax(error) error {
	return w.fatal(syntaxMessage(w.body))
}

func syntaxMessage(body []byte) string {
	var se *json.SyntaxError
	if err := json.Unmarshal(body, new(json.RawMessage)); !errors.As(err, &se) {
		return "invalid JSON"
	}
	if se.Error() == "unexpected end of JSON input" {
		return "invalid JSON: unexpected end of body"
	}
	return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error())
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	timeType            = reflect.TypeFor[time.Time]()
)

func (w *walker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		pt := reflect.PointerTo(t)
		if pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType) {
			return w.custom(t, path)
		}
	}
	tok, err := w.dec.Token()
	if err != nil {
		return w.syntax(err)
	}
	switch tok {
	case json.Delim('{'):
		return w.object(t, path)
	case json.Delim('['):
		return w.array(t, path)
	}
	if _, ok := tok.(json.Delim); ok {
		// The decoder reports a misplaced closing delimiter as a syntax
		// error, so this is unreachable; refuse rather than trust it.
		return w.fatal("invalid JSON")
	}
	return w.scalar(t, tok, path)
}

// custom checks a value whose type decodes itself (time.Time and the
// domain's enums): it runs the type's own decoder on a scratch value so a
// bad timestamp is reported with its path, which encoding/json does not do.
func (w *walker) custom(t reflect.Type, path string) error {
	var raw json.RawMessage
	if err := w.dec.Decode(&raw); err != nil {
		return w.syntax(err)
	}
	// Walk the raw value too, for duplicate keys and depth.
	outer := w.dec
	w.dec = json.NewDecoder(bytes.NewReader(raw))
	w.dec.UseNumber()
	err := w.value(nil, path)
	w.dec = outer
	if err != nil {
		return err
	}
	if string(raw) == "null" {
		return nil
	}
	if holdsNUL(raw) {
		return w.add(path, msgNUL)
	}
	target := reflect.New(t).Interface()
	if u, ok := target.(json.Unmarshaler); ok {
		err = u.UnmarshalJSON(raw)
	} else {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return w.add(path, "must be a string")
		}
		err = target.(encoding.TextUnmarshaler).UnmarshalText([]byte(s))
	}
	if err == nil {
		return nil
	}
	if t == timeType {
		// time's own message quotes the input back.
		return w.add(path, "must be an RFC 3339 timestamp")
	}
	// The domain's own types word their own messages, and must not quote
	// the input either.
	return w.add(path, err.Error())
}

func (w *walker) object(t reflect.Type, path string) error {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > maxDepth {
		return w.fatal(fmt.Sprintf("JSON is nested more than %d levels deep", maxDepth))
	}

	var fields map[string]fieldInfo
	var elem reflect.Type
	if t != nil {
		switch {
		case t.Kind() == reflect.Struct:
			fields = structFields(t)
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		case isEmptyInterface(t):
			elem = t
		default:
			if err := w.add(path, "must be "+describe(t)); err != nil {
				return err
			}
			t = nil
		}
	}

	seen := make(map[string]struct{})
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return w.syntax(err)
		}
		key, ok := tok.(string)
		if !ok {
			return w.fatal("invalid JSON: object key is not a string")
		}
		if t != nil && strings.ContainsRune(key, 0) {
			if err := w.add(path, msgNULKey); err != nil {
				return err
			}
			if err := w.value(nil, path); err != nil {
				return err
			}
			continue
		}
		kpath := key
		if path != "" {
			kpath = path + "." + key
		}

		var child reflect.Type
		problem := ""
		if _, dup := seen[key]; dup {
			problem = "duplicate key"
		} else {
			seen[key] = struct{}{}
		}
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			f, ok := fields[key]
			switch {
			case !ok:
				if problem == "" {
					problem = "unknown field"
				}
			case f.quoted:
				if problem != "" {
					if err := w.add(kpath, problem); err != nil {
						return err
					}
				}
				if err := w.quoted(f.typ, kpath); err != nil {
					return err
				}
				continue
			default:
				child = f.typ
			}
		default:
			child = elem
			if problem == "" && t.Kind() == reflect.Map {
				problem = checkMapKey(t.Key(), key)
			}
		}
		if problem != "" {
			if err := w.add(kpath, problem); err != nil {
				return err
			}
		}
		if err := w.value(child, kpath); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // the closing brace
		return w.syntax(err)
	}
	return nil
}

// quoted checks a ",string" field, whose value is a JSON string holding the
// JSON literal of a number, bool or string.
func (w *walker) quoted(t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return w.syntax(err)
	}
	if tok == json.Delim('{') || tok == json.Delim('[') {
		if err := w.add(path, "must be a string"); err != nil {
			return err
		}
		if tok == json.Delim('{') {
			return w.object(nil, path)
		}
		return w.array(nil, path)
	}
	if tok == nil {
		return nil
	}
	s, ok := tok.(string)
	if !ok {
		return w.add(path, "must be a string")
	}
	if s == "null" {
		return nil
	}
	if strings.ContainsRune(s, 0) {
		return w.add(path, msgNUL)
	}
	msg := ""
	switch t.Kind() {
	case reflect.Bool:
		if s != "true" && s != "false" {
			msg = "must be a string holding true or false"
		}
	case reflect.String:
		var inner string
		switch {
		case json.Unmarshal([]byte(s), &inner) != nil:
			msg = "must be a string holding a JSON string"
		case strings.ContainsRune(inner, 0):
			msg = msgNUL
		}
	default: // numbers
		if !isNumberToken(s) {
			msg = "must be a string holding " + describe(t)
		} else {
			return w.scalar(t, json.Number(s), path)
		}
	}
	if msg == "" {
		return nil
	}
	return w.add(path, msg)
}

func checkMapKey(kt reflect.Type, key string) string {
	if reflect.PointerTo(kt).Implements(textUnmarshalerType) {
		return "" // left to the type itself, in the final decode
	}
	switch kt.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(key, 10, kt.Bits()); err != nil {
			return "key must be an integer in range"
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if _, err := strconv.ParseUint(key, 10, kt.Bits()); err != nil {
			return "key must be a non-negative integer in range"
		}
	}
	return ""
}

func (w *walker) array(t reflect.Type, path string) error {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > maxDepth {
		return w.fatal(fmt.Sprintf("JSON is nested more than %d levels deep", maxDepth))
	}

	var elem reflect.Type
	limit := -1
	if t != nil {
		switch {
		case t.Kind() == reflect.Slice:
			elem = t.Elem()
		case t.Kind() == reflect.Array:
			elem, limit = t.Elem(), t.Len()
		case isEmptyInterface(t):
			elem = t
		default:
			if err := w.add(path, "must be "+describe(t)); err != nil {
				return err
			}
		}
	}

	for i := 0; w.dec.More(); i++ {
		child := elem
		if limit >= 0 && i >= limit {
			// encoding/json drops the extra elements without a word.
			if i == limit {
				if err := w.add(path, fmt.Sprintf("must have at most %d elements", limit)); err != nil {
					return err
				}
			}
			child = nil
		}
		if err := w.value(child, path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // the closing bracket
		return w.syntax(err)
	}
	return nil
}

func (w *walker) scalar(t reflect.Type, tok json.Token, path string) error {
	if t == nil || tok == nil {
		return nil // null leaves the zero value; required fields are the caller's
	}
	if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
		return w.add(path, msgNUL)
	}
	msg := ""
	switch t.Kind() {
	case reflect.String:
		if t == numberType {
			// json.Number takes a number, or a string holding one.
			if !isNumberToken(tok) {
				msg = "must be a number"
			}
			break
		}
		if _, ok := tok.(string); !ok {
			msg = "must be a string"
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			msg = "must be a boolean"
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		msg = checkInt(tok, t, true)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		msg = checkInt(tok, t, false)
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			msg = "must be a number"
		} else if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			msg = "number is out of range"
		}
	case reflect.Interface:
		// encoding/json turns numbers into float64 and fails on overflow.
		if n, ok := tok.(json.Number); ok && isEmptyInterface(t) {
			if _, err := strconv.ParseFloat(string(n), 64); err != nil {
				msg = "number is out of range"
			}
		}
	case reflect.Slice:
		s, ok := tok.(string)
		switch {
		case t.Elem().Kind() != reflect.Uint8:
			msg = "must be an array"
		case !ok:
			msg = "must be a base64 string or an array"
		default:
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				msg = "must be base64"
			}
		}
	case reflect.Struct, reflect.Map:
		msg = "must be an object"
	case reflect.Array:
		msg = "must be an array"
	}
	if msg == "" {
		return nil
	}
	return w.add(path, msg)
}

var numberType = reflect.TypeFor[json.Number]()

// holdsNUL reports whether a JSON value has NUL in any string or key. Only
// the values of types that decode themselves need it: the walker checks the
// rest token by token.
func holdsNUL(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false // a syntax error is reported elsewhere
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return strings.ContainsRune(v, 0)
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for k, e := range v {
				if strings.ContainsRune(k, 0) || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

func isNumberToken(tok json.Token) bool {
	switch tok := tok.(type) {
	case json.Number:
		return true
	case string:
		var n json.Number
		return tok != "" && (tok[0] == '-' || isDigit(tok[0])) && json.Unmarshal([]byte(tok), &n) == nil
	}
	return false
}

func checkInt(tok json.Token, t reflect.Type, signed bool) string {
	want := "must be an integer"
	if !signed {
		want = "must be a non-negative integer"
	}
	n, ok := tok.(json.Number)
	if !ok {
		return want
	}
	s := string(n)
	if strings.ContainsAny(s, ".eE") {
		// 49900.0 and 4.99e4 are the same number as 49900, but a client
		// that sends them is computing amounts in floating point.
		return want + " (no decimal point or exponent)"
	}
	var err error
	if signed {
		_, err = strconv.ParseInt(s, 10, t.Bits())
	} else {
		_, err = strconv.ParseUint(s, 10, t.Bits())
	}
	if err != nil {
		if !signed && strings.HasPrefix(s, "-") {
			return want
		}
		return "integer is out of range"
	}
	return ""
}

func isEmptyInterface(t reflect.Type) bool {
	return t.Kind() == reflect.Interface && t.NumMethod() == 0
}

// describe names the JSON shape a Go type expects, for "must be ..." messages.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return "an RFC 3339 timestamp"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "a different type"
	}
}

// fromJSONError turns an encoding/json error from the backstop decode into
// the same vocabulary the walker uses.
func fromJSONError(err error) error {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
		ie *json.InvalidUnmarshalError
	)
	switch {
	case errors.As(err, &ie):
		return err
	case errors.As(err, &te):
		field := te.Field
		if te.Type != nil {
			return &DecodeError{Errors: []FieldError{{Field: field, Message: "must be " + describe(te.Type)}}}
		}
		return &DecodeError{Errors: []FieldError{{Field: field, Message: "has the wrong type"}}}
	case errors.As(err, &se):
		return bodyError(fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error()))
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &DecodeError{Errors: []FieldError{{Field: strings.TrimSuffix(name, `"`), Message: "unknown field"}}}
	}
	// encoding/json's other messages can quote the offending input.
	return bodyError("body does not match the expected fields and types")
}
