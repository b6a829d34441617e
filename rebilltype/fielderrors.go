package rebilltype

import (
	"fmt"
	"strings"

	"github.com/rebill/rebill/fault"
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

// Errors lists every field a request gets wrong, so that a client fixes
// them all at once. Domain validation returns it (through Err); the HTTP
// layer answers 400 with it as the problem's `errors`.
type Errors []FieldError

// Add records that field is wrong; format says how, never quoting the
// submitted value.
func (e *Errors) Add(field, format string, args ...any) {
	*e = append(*e, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err is nil when nothing was recorded, else the list as an error.
func (e Errors) Err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

func (Errors) ErrorCode() fault.Code { return fault.Invalid }

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, fe := range e {
		parts[i] = fe.Field + ": " + fe.Message
	}
	return "invalid request: " + strings.Join(parts, "; ")
}
