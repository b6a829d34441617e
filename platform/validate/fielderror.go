package validate

import (
	"strings"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/rebilltype"
)

// DecodeError means the body is not acceptable JSON for the target type; the
// HTTP layer answers 400 with Errors as the field-level list.
type DecodeError struct {
	Errors []rebilltype.FieldError
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
	return &DecodeError{Errors: []rebilltype.FieldError{{Field: "", Message: msg}}}
}
