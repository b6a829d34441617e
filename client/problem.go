package client

import (
	"fmt"
	"strings"
)

// ProblemTypeBase prefixes every problem type rebill answers.
const ProblemTypeBase = "https://rebill.dev/problems/"

// Problem slugs a caller commonly branches on (the API description's table
// has them all).
const (
	ProblemValidation        = "validation-error"
	ProblemNotFound          = "not-found"
	ProblemForbidden         = "forbidden"
	ProblemUnauthorized      = "unauthorized"
	ProblemInvalidTransition = "invalid-transition"
	// ProblemPaymentDeclined is reserved: rebill never sends it (a decline
	// is a charge's status and failure_code, not an error of a request).
	ProblemPaymentDeclined     = "payment-declined"
	ProblemIdempotencyKeyInUse = "idempotency-key-in-use"
	ProblemIdempotencyMismatch = "idempotency-key-mismatch"
	ProblemServiceUnavailable  = "service-unavailable"
	ProblemGatewayUnavailable  = "gateway-unavailable"
	ProblemVelocityLimit       = "velocity-limit"
	ProblemCardNumberRefused   = "card-number-refused"
)

// Error makes a *Problem the error of a failed call, so callers reach it
// with errors.As. The message carries what the server chose to say, never
// anything the client sent (a token or a key could be there).
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rebill: %d %s", p.Status, p.Slug())
	if p.Title != "" {
		b.WriteString(": " + p.Title)
	}
	if p.Detail != "" && p.Detail != p.Title {
		b.WriteString(": " + p.Detail)
	}
	for i, f := range p.FieldErrors() {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", f.Field, f.Message)
		if i == len(p.FieldErrors())-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// Slug is the problem type without ProblemTypeBase (`validation-error`),
// or the whole type when it is not one of rebill's.
func (p *Problem) Slug() string {
	return strings.TrimPrefix(p.Type, ProblemTypeBase)
}

// FieldErrors are the field-level errors of a validation problem.
func (p *Problem) FieldErrors() []FieldError {
	if p.Errors == nil {
		return nil
	}
	return *p.Errors
}

// Field is the message for one field, and whether the problem names it.
func (p *Problem) Field(name string) (string, bool) {
	for _, f := range p.FieldErrors() {
		if f.Field == name {
			return f.Message, true
		}
	}
	return "", false
}
