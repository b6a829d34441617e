package validate

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/rebill/rebill/rebilltype"
)

// Decode decodes body, which must be a single JSON object, into dst, a
// non-nil pointer, with github.com/go-json-experiment/json (json v2). It is
// stricter than encoding/json because a lenient reading of a payment request
// silently charges something the client did not mean:
//
//   - an empty body is read as {} (POSTs whose fields are all optional);
//   - unknown fields are refused at every level, and keys match struct
//     field names exactly (encoding/json would let "Amount" set "amount");
//   - a key repeated in one object is refused, since which value wins is a
//     guess, and request fingerprints would disagree with what was applied;
//   - integer fields take only integer literals: 49900.0 and 4.99e4 are
//     refused rather than rounded or truncated;
//   - anything after the object, and bodies that are not UTF-8, are refused;
//   - no string or object key may hold NUL (\u0000), which PostgreSQL
//     cannot store and json v2 accepts.
//
// null leaves a field at its zero value; callers check required fields.
//
// The error is [ErrBodyTooLarge] or a [*DecodeError]. The library stops at
// the first JSON-level error, so one is reported alone: a syntax error
// (duplicate keys, bad UTF-8 and trailing data included) before anything
// else, then every string and key holding NUL (up to 20, listed together),
// then the first unknown field or wrong type in body order. Domain
// validation, which lists every problem at once, runs on the decoded value
// afterwards. Any other error means dst is not a non-nil pointer, which is a
// bug in the caller. When an error is returned, dst may have been partly
// written and must not be used.
func Decode(body []byte, dst any) error {
	if len(body) > MaxBodyBytes {
		return ErrBodyTooLarge
	}
	if rv := reflect.ValueOf(dst); rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("validate.Decode: dst must be a non-nil pointer, got %T", dst)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		body, trimmed = []byte("{}"), []byte("{}")
	}
	if trimmed[0] != '{' {
		return bodyError("body must be a JSON object")
	}
	if errs := scan(body); len(errs) > 0 {
		return &DecodeError{Errors: errs}
	}
	err := json.Unmarshal(body, dst, json.RejectUnknownMembers(true))
	var se *json.SemanticError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &DecodeError{Errors: []rebilltype.FieldError{{Field: fieldAt(body, se.JSONPointer), Message: semanticMessage(se)}}}
	}
	// scan read the same body without a syntax error.
	return bodyError("invalid JSON")
}

// semanticMessage says what a field must be, without quoting the value.
func semanticMessage(se *json.SemanticError) string {
	if se.Err == json.ErrUnknownName {
		return "unknown field"
	}
	t := se.GoType
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "has the wrong type"
	}
	want := "must be " + describe(t)
	if se.JSONKind == '0' { // a number the type cannot hold
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			switch {
			case bytes.ContainsAny(se.JSONValue, ".eE"):
				// 49900.0 and 4.99e4 are the same number as 49900, but
				// a client that sends them computes amounts in floating point.
				return want + " (no decimal point or exponent)"
			case bytes.HasPrefix(se.JSONValue, []byte("-")) && t.Kind() >= reflect.Uint:
				return want
			}
			return "integer is out of range"
		case reflect.Float32, reflect.Float64:
			return "number is out of range"
		}
	}
	return want
}

var timeType = reflect.TypeFor[time.Time]()

// describe names the JSON shape a Go type takes, for "must be ..." messages.
func describe(t reflect.Type) string {
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
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "of a different type"
}
