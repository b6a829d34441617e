package validate

import (
	"fmt"
	"io"

	"github.com/rebill/rebill/fault"
)

// MaxBodyBytes caps a request body. Every request the API accepts fits in a
// few kilobytes, so anything larger is a mistake or an attack, and refusing
// it early bounds the memory and CPU one request can take.
const MaxBodyBytes = 64 << 10

// ErrBodyTooLarge is returned when a body is over [MaxBodyBytes]; the HTTP
// layer answers 413.
var ErrBodyTooLarge = fault.New(fault.Invalid, "request body is larger than 64 KiB")

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
