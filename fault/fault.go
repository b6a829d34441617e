// Package fault is the vocabulary domain errors share with the edges that
// answer them (the API, the console): each domain error carries a Code, so
// an edge decides how to answer from the code alone and a new domain error
// needs no new case there. A code does not replace an error's identity:
// errors.Is and errors.As see through wrapping.
package fault

import (
	"errors"
	"strings"
)

// Code is the kind of a failure, as whoever asked must act on it.
type Code string

// The codes. An error without one is a defect or an outage the caller
// cannot fix: the edges answer it as an internal error and log it.
const (
	// Invalid: the input is wrong; the same request fails again.
	Invalid Code = "invalid"
	// NotFound: no such object, or not one the caller may see.
	NotFound Code = "not_found"
	// Conflict: the object's state (or the service's) does not allow the
	// change now; the message says why.
	Conflict Code = "conflict"
	// Forbidden: the caller may not do this.
	Forbidden Code = "forbidden"
	// Unavailable: something the request needs could not be reached, so
	// nothing was done; the same request may succeed later.
	Unavailable Code = "unavailable"
	// Limited: the caller went over a rate limit; nothing was done. Its
	// error says when to try again with a RetryAfterSeconds() int method,
	// which the API sends as Retry-After.
	Limited Code = "limited"
)

// Codes lists every code, so an edge's tests can check that it answers
// each one.
var Codes = []Code{Invalid, NotFound, Conflict, Forbidden, Unavailable, Limited}

// Coder is implemented by domain error types that carry a code.
type Coder interface {
	error
	ErrorCode() Code
}

// New returns a sentinel error with a code, for `var ErrX = fault.New(...)`.
func New(code Code, message string) error {
	return &sentinel{code: code, message: message}
}

type sentinel struct {
	code    Code
	message string
}

func (e *sentinel) Error() string   { return e.message }
func (e *sentinel) ErrorCode() Code { return e.code }

// CodeOf is the code of the first error in err's chain that has one; ""
// when none does.
func CodeOf(err error) Code {
	var c Coder
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return ""
}

// Message is the part of err's text meant for whoever made the request: the
// text of the coded error with the details the domain appended to it
// (fmt.Errorf("%w: the card was reported stolen", ErrX)), without the
// context callers put in front of it ("cancel subscription %s: %w"), which
// is for logs. It is err's whole text when nothing in err has a code.
func Message(err error) string {
	var c Coder
	if !errors.As(err, &c) {
		return err.Error()
	}
	own := c.Error()
	for e := err; e != nil; e = errors.Unwrap(e) {
		if text := e.Error(); strings.HasPrefix(text, own) {
			return text // the outermost error that begins with own
		}
	}
	return own
}
