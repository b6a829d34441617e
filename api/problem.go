package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/rebill/rebill/internal/validate"
)

// problemBase prefixes every problem type URI.
const problemBase = "https://rebill.dev/problems/"

// Problem is an RFC 9457 problem detail, the body of every error response.
type Problem struct {
	Type   string                `json:"type"`
	Title  string                `json:"title"`
	Status int                   `json:"status"`
	Detail string                `json:"detail"`
	Errors []validate.FieldError `json:"errors,omitempty"`
}

func newProblem(status int, slug, title, detail string) Problem {
	return Problem{Type: problemBase + slug, Title: title, Status: status, Detail: detail}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func validationProblem(errs ...validate.FieldError) Problem {
	p := newProblem(http.StatusBadRequest, "validation-error", "Invalid request", "The request has invalid fields.")
	p.Errors = errs
	return p
}

func fieldProblem(field, message string) Problem {
	return validationProblem(validate.FieldError{Field: field, Message: message})
}

var (
	problemUnauthorized = newProblem(http.StatusUnauthorized, "unauthorized", "Unauthorized",
		"Send a valid API key as `Authorization: Bearer <key>`.")
	problemForbidden = newProblem(http.StatusForbidden, "forbidden", "Forbidden",
		"This API key's role does not allow this request.")
	problemNotFound = newProblem(http.StatusNotFound, "not-found", "Not found",
		"No such resource.")
	problemInternal = newProblem(http.StatusInternalServerError, "internal-error", "Internal error",
		"The request failed; it was not applied. Retry with the same Idempotency-Key.")
	problemUnavailable = newProblem(http.StatusServiceUnavailable, "service-unavailable", "Service unavailable",
		"The database is unreachable; nothing was executed. Retry later with the same Idempotency-Key.")
	problemBodyTooLarge = newProblem(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large",
		"Request bodies are limited to 64 KiB.")
)

// writeJSON encodes v before it writes anything: once the status line is
// out, a value that fails to encode (a time past year 9999) would leave a
// 2xx with an empty body, which the idempotency middleware would store and
// replay. A failure is a 500 instead, which is never stored.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encodeJSON(v)
	if err != nil {
		w.Header().Del("Location") // the object it names is rolled back
		writeProblem(w, problemInternal)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// encodeJSON is the body writeJSON sends for v.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return buf.Bytes(), nil
}
