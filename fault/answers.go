package fault

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Answer is how every edge answers an error of one code: the API as a
// problem (RFC 9457) with Status, Type and Title, the console as a page
// with the same Status and Title and People's sentence. Both take them
// from Answers, so a code is mapped once and the two edges cannot drift
// apart (a database outage was a 500 page in the console while the API
// said 503).
type Answer struct {
	Status int
	// Type is the problem type's slug (https://rebill.dev/problems/<Type>).
	Type  string
	Title string
	// Detail is the problem's detail; "" when it is the error's Message,
	// which domain packages write for the caller.
	Detail string
	// People is what a person is told; when WithMessage, the error's
	// Message follows it (after ": ").
	People      string
	WithMessage bool
	// RetryAfter is the Retry-After header in seconds, "" for none; an
	// error with a RetryAfterSeconds() int method says its own.
	RetryAfter string
	// Log is the log message; "" when the refusal is the caller's
	// business, not the operator's.
	Log string
}

// Answers is the answer to each code.
var Answers = map[Code]Answer{
	Invalid: {Status: http.StatusBadRequest, Type: "validation-error", Title: "Invalid request",
		Detail: "The request has invalid fields.", People: "Not done", WithMessage: true},
	NotFound: {Status: http.StatusNotFound, Type: "not-found", Title: "Not found",
		Detail: "No such resource.", People: "Not found: there is no such object, or this key may not see it."},
	// Decision 11: a refused move (a retry included) is an invalid
	// transition, whatever the state machine.
	Conflict: {Status: http.StatusConflict, Type: "invalid-transition", Title: "Invalid transition",
		People: "Not done", WithMessage: true},
	// Roles are checked before the domain is asked; the domain forbids
	// only what a customer key does for another customer.
	Forbidden: {Status: http.StatusForbidden, Type: "forbidden", Title: "Forbidden",
		Detail: "A customer key can only create and list its own customer's subscriptions.",
		People: "This key may not do that."},
	// The database is what every request needs; another dependency that
	// cannot be reached has its own answer at the edge.
	Unavailable: {Status: http.StatusServiceUnavailable, Type: "service-unavailable", Title: "Service unavailable",
		Detail:     "The database is unreachable; nothing was executed. Retry later with the same Idempotency-Key.",
		People:     "Not done: the database could not be reached, so nothing was changed. Try again in a moment.",
		RetryAfter: "1", Log: "database unavailable"},
	// Nothing was done, and the same request succeeds once the window
	// has passed.
	Limited: {Status: http.StatusTooManyRequests, Type: "velocity-limit", Title: "Velocity limit",
		People: "Not done, over a limit", WithMessage: true},
}

// Internal is the answer to an error without a code (or with a code no
// edge knows): a defect, whose details go to the log only.
var Internal = Answer{Status: http.StatusInternalServerError, Type: "internal-error", Title: "Internal error",
	Detail: "The request failed; it was not applied. Retry with the same Idempotency-Key.",
	People: "Something went wrong; nothing was changed. Try again, or ask an engineer to look at the logs.",
	Log:    "request failed"}

// Classify is err's code, with an error that says the database could not
// be reached (which no domain package codes: it comes from the driver)
// classed Unavailable; "" for a defect.
func Classify(err error) Code {
	if code := CodeOf(err); code != "" {
		return code
	}
	if DatabaseUnavailable(err) {
		return Unavailable
	}
	return ""
}

// AnswerTo is the answer to err by its code (Classify): Internal when it
// has none an edge knows.
func AnswerTo(err error) (Code, Answer) {
	code := Classify(err)
	a, ok := Answers[code]
	if !ok {
		return code, Internal
	}
	return code, a
}

// Sentence is what a person is told of err under a: People, followed by
// err's Message when a says so.
func (a Answer) Sentence(err error) string {
	if !a.WithMessage {
		return a.People
	}
	msg := strings.TrimSuffix(Message(err), ".")
	return a.People + ": " + msg + "."
}

// DatabaseUnavailable reports whether err says the database could not be
// reached or dropped the connection, rather than refused the statement.
// That is a passing condition of the server, not a bug, and what the
// request did was not committed: 503 with Retry-After tells clients and
// load balancers to back off and retry, where a 500 would read as a defect.
func DatabaseUnavailable(err error) bool {
	var (
		connectErr *pgconn.ConnectError
		pgErr      *pgconn.PgError
		netErr     net.Error
	)
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, puddle.ErrClosedPool), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01..57P04: shutdown, crash,
		// cannot connect now, database dropped; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "53300"
	}
	return false
}
