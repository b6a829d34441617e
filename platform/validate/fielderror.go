package validate

import (
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

// DecodeError means the body is not acceptable JSON for the target type; the
// HTTP layer answers 400 with Errors as the field-level list.
type DecodeError struct {
	Errors []FieldError
}

func (*DecodeError) ErrorCode() fault.Code { return fault.Invalid }

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

func bodyError(msg string) *DecodeError {
	return &DecodeError{Errors: []FieldError{{Field: "", Message: msg}}}
}
