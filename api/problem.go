package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
)

// problemBase prefixes every problem type URI.
const problemBase = "https://rebill.dev/problems/"

// Problem is an RFC 9457 problem detail, the body of every error response.
type Problem struct {
	Type   string                  `json:"type"`
	Title  string                  `json:"title"`
	Status int                     `json:"status"`
	Detail string                  `json:"detail"`
	Errors []rebilltype.FieldError `json:"errors,omitempty"`
	// EnrollmentID names the enrollment a request would have repeated
	// (enrollment-exists).
	EnrollmentID string `json:"enrollment_id,omitempty"`
	// The amounts of a refund refused as larger than what is left
	// (refund-amount-too-large, charge-already-refunded): the capture,
	// what earlier refunds hold of it (succeeded or in flight), and what
	// may still be refunded.
	AmountCaptured   *int64 `json:"amount_captured,omitempty"`
	AmountReserved   *int64 `json:"amount_reserved,omitempty"`
	AmountRefundable *int64 `json:"amount_refundable,omitempty"`
}

func newProblem(status int, slug, title, detail string) Problem {
	return Problem{Type: problemBase + slug, Title: title, Status: status, Detail: detail}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func validationProblem(errs ...rebilltype.FieldError) Problem {
	p := newProblem(http.StatusBadRequest, "validation-error", "Invalid request", "The request has invalid fields.")
	p.Errors = errs
	return p
}

var (
	problemUnauthorized = newProblem(http.StatusUnauthorized, "unauthorized", "Unauthorized",
		"Send a valid API key as `Authorization: Bearer <key>`.")
	problemForbidden = newProblem(http.StatusForbidden, "forbidden", "Forbidden",
		"This API key's role does not allow this request.")
	problemNotFound     = answerOf(fault.NotFound, fault.Answers[fault.NotFound]).problem
	problemInternal     = answerOf("", fault.Internal).problem
	problemUnavailable  = answerOf(fault.Unavailable, fault.Answers[fault.Unavailable]).problem
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

// fail is the one place an error becomes a response (see answerFor);
// anything unexpected is a 500 whose details go to the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	a := answerFor(err)
	if a.logAs != "" {
		s.Logger.Error().Err(err).Str("request_id", requestID(r)).Msg(a.logAs)
	}
	if a.unstored {
		idempotency.Unstored(r.Context())
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	writeProblem(w, a.problem)
}

// answer is how the API answers an error.
type answer struct {
	problem    Problem
	retryAfter string // the Retry-After header; "" for none
	// unstored: nothing was executed, and the same Idempotency-Key must
	// run afresh once the condition is gone rather than replay this
	// refusal.
	unstored bool
	logAs    string // the log message; "" when the refusal is the caller's business
}

// answerOf is the API's answer to a code's fault.Answer: the table
// both edges share (fault.Answers), as a problem.
func answerOf(code fault.Code, a fault.Answer) answer {
	out := answer{problem: newProblem(a.Status, a.Type, a.Title, a.Detail), retryAfter: a.RetryAfter, logAs: a.Log}
	if code == fault.Invalid {
		out.problem = validationProblem()
	}
	return out
}

// answerFor maps err to its answer: by its code (answers), except for the
// few errors whose problem says more than their code.
func answerFor(err error) answer {
	var (
		card    *cardNumberError
		exists  *enrollments.ExistsError
		exceeds *charges.RefundExceedsError
	)
	switch {
	case errors.As(err, &card):
		return answer{problem: cardNumberProblem(card.field)}
	case errors.Is(err, validate.ErrBodyTooLarge):
		return answer{problem: problemBodyTooLarge}
	case errors.Is(err, autopay.ErrRegistryNotConfigured):
		// Once a registry is configured, the same key must create the
		// enrollment, not replay this refusal.
		return answer{unstored: true, problem: newProblem(http.StatusConflict, "registry-not-configured", "Registry not configured",
			"No state payment registry is configured, so fines cannot be paid: a fine is paid only once the registry accepted its payment. Nothing was created.")}
	case errors.As(err, &exists):
		p := newProblem(http.StatusConflict, "enrollment-exists", "Enrollment exists",
			"The customer already has an enrollment of this kind for this account (the same ELS, or a shared STS or "+
				"driving licence) that is not cancelled: enrollment_id names it. Change that one, or cancel it first.")
		p.EnrollmentID = exists.ID.String()
		return answer{unstored: true, problem: p}
	case errors.Is(err, subscriptions.ErrCreatedBefore), errors.Is(err, enrollments.ErrCreatedBefore),
		errors.Is(err, subscriptions.ErrChangedBefore):
		// The key's record has expired, and its creation is still there:
		// the key is refused as one reused for another request. The
		// insert that found the id taken aborted the transaction, so the
		// refusal cannot be stored with it, and needs not be: the object
		// that holds the id answers the same way to every retry.
		return answer{unstored: true, problem: newProblem(http.StatusUnprocessableEntity, "idempotency-key-mismatch",
			"Idempotency-Key reused", fault.Message(err)+". Nothing was done.")}
	case errors.Is(err, enrollments.ErrBillConflict):
		return answer{problem: newProblem(http.StatusConflict, "bill-conflict", "Bill conflict",
			"A bill with this bill_id exists with a different amount or dates; the issuer must send a new bill_id.")}
	case errors.As(err, &exceeds):
		return answer{problem: refundExceedsProblem(exceeds)}
	case errors.Is(err, charges.ErrFineNotRefundable):
		return answer{problem: newProblem(http.StatusConflict, "fine-not-refundable", "Fine not refundable",
			"This charge paid a fine, and the payment was posted to the state payment registry: money paid to the state is returned "+
				"through the state's own procedure (a claim to the body that issued the fine), not by a card refund. Nothing was done.")}
	case errors.Is(err, charges.ErrNotRefundable):
		return answer{problem: newProblem(http.StatusConflict, "charge-not-refundable", "Charge not refundable",
			"Only a succeeded charge holds captured money to return: "+fault.Message(err)+". Nothing was done.")}
	case errors.Is(err, charges.ErrGatewayUnreachable):
		return answer{retryAfter: "5", problem: newProblem(http.StatusServiceUnavailable, "gateway-unavailable", "Gateway unavailable",
			"The payment gateway could not be asked what the charge's last attempt did, so nothing was done. Retry later with the same Idempotency-Key.")}
	}
	code, fa := fault.AnswerTo(err)
	a := answerOf(code, fa)
	if fa.Status == http.StatusInternalServerError {
		return a
	}
	if a.problem.Detail == "" {
		a.problem.Detail = fault.Message(err)
	}
	if code == fault.Invalid {
		a.problem.Errors = fieldErrors(err)
	}
	var wait interface{ RetryAfterSeconds() int }
	if errors.As(err, &wait) {
		a.retryAfter = strconv.Itoa(wait.RetryAfterSeconds())
	}
	return a
}

// refundExceedsProblem is a refund above what is left of the capture, as
// Stripe answers it (amount_too_large; charge_already_refunded when
// nothing is left), with the amounts.
func refundExceedsProblem(e *charges.RefundExceedsError) Problem {
	p := newProblem(http.StatusConflict, "refund-amount-too-large", "Refund amount too large",
		fmt.Sprintf("The refund of %d is above what is left of the charge: %d captured, %d refunded or being refunded, %d left. Nothing was done.",
			e.Requested, e.Captured, e.Reserved, e.Remaining()))
	if e.Remaining() <= 0 {
		p = newProblem(http.StatusConflict, "charge-already-refunded", "Charge already refunded",
			fmt.Sprintf("Nothing is left to refund: %d captured, %d refunded or being refunded. Nothing was done.", e.Captured, e.Reserved))
	}
	captured, reserved, left := e.Captured, e.Reserved, max(e.Remaining(), 0)
	p.AmountCaptured, p.AmountReserved, p.AmountRefundable = &captured, &reserved, &left
	return p
}

// fieldErrors lists the fields an Invalid error names; an error that names
// none is about the request as a whole.
func fieldErrors(err error) []rebilltype.FieldError {
	var (
		fields    rebilltype.Errors
		decodeErr *validate.DecodeError
	)
	switch {
	case errors.As(err, &fields):
		return fields
	case errors.As(err, &decodeErr):
		return decodeErr.Errors
	}
	return []rebilltype.FieldError{{Field: "", Message: fault.Message(err)}}
}

// cardNumberProblem names the field that holds what looks like a card
// number, never the number.
func cardNumberProblem(field string) Problem {
	p := newProblem(http.StatusBadRequest, "card-number-refused", "Card number refused",
		"A field contains what looks like a card number. rebill accepts only payment tokens from a gateway.")
	p.Errors = []rebilltype.FieldError{{Field: field, Message: "looks like a card number"}}
	return p
}
