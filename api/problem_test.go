package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/console"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
	"github.com/rebill/rebill/velocity"
)

// failCase is an error as it reaches the API and the exact response it
// gets.
type failCase struct {
	name       string
	err        error
	status     int
	body       string // the exact bytes
	retryAfter string
	logged     string // the log message; "" when nothing is logged
}

// domainFailures are the errors the domain hands the API, in the shapes
// they arrive in; the bodies are what clients have always been sent.
func domainFailures() []failCase {
	id := uuid.MustParse("0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
	notFound := `{"type":"https://rebill.dev/problems/not-found","title":"Not found","status":404,"detail":"No such resource."}` + "\n"
	transition := func(detail string) string {
		return `{"type":"https://rebill.dev/problems/invalid-transition","title":"Invalid transition","status":409,"detail":"` + detail + `"}` + "\n"
	}
	return []failCase{
		{name: "field errors", err: rebilltype.Errors{{Field: "amount", Message: "must be positive"}, {Field: "currency", Message: "must be RUB"}},
			status: 400, body: `{"type":"https://rebill.dev/problems/validation-error","title":"Invalid request","status":400,"detail":"The request has invalid fields.","errors":[{"field":"amount","message":"must be positive"},{"field":"currency","message":"must be RUB"}]}` + "\n"},
		{name: "undecodable body", err: &validate.DecodeError{Errors: []rebilltype.FieldError{{Field: "", Message: "body must be a JSON object"}}},
			status: 400, body: `{"type":"https://rebill.dev/problems/validation-error","title":"Invalid request","status":400,"detail":"The request has invalid fields.","errors":[{"field":"","message":"body must be a JSON object"}]}` + "\n"},
		{name: "card number", err: &cardNumberError{field: "metadata.note"},
			status: 400, body: `{"type":"https://rebill.dev/problems/card-number-refused","title":"Card number refused","status":400,"detail":"A field contains what looks like a card number. rebill accepts only payment tokens from a gateway.","errors":[{"field":"metadata.note","message":"looks like a card number"}]}` + "\n"},
		{name: "body too large", err: validate.ErrBodyTooLarge,
			status: 413, body: `{"type":"https://rebill.dev/problems/body-too-large","title":"Body too large","status":413,"detail":"Request bodies are limited to 64 KiB."}` + "\n"},
		{name: "unknown id", err: errUnknownID, status: 404, body: notFound},
		{name: "subscription not found", err: subscriptions.ErrNotFound, status: 404, body: notFound},
		{name: "charge not found", err: charges.ErrNotFound, status: 404, body: notFound},
		{name: "event not found", err: notify.ErrNotFound, status: 404, body: notFound},
		{name: "endpoint not found", err: notify.ErrEndpointNotFound, status: 404, body: notFound},
		{name: "enrollment not found", err: enrollments.ErrNotFound, status: 404, body: notFound},
		{name: "bill not found", err: enrollments.ErrBillNotFound, status: 404, body: notFound},
		{name: "not found behind context", err: fmt.Errorf("charge %s: %w", id, charges.ErrNotFound), status: 404, body: notFound},
		{name: "another customer", err: usecases.ErrForbidden,
			status: 403, body: `{"type":"https://rebill.dev/problems/forbidden","title":"Forbidden","status":403,"detail":"A customer key can only create and list its own customer's subscriptions."}` + "\n"},
		{name: "subscription transition",
			err:    &fsm.TransitionError{Machine: "subscription", From: "active", To: "active", Reason: "only a paused subscription can be resumed"},
			status: 409, body: transition("subscription cannot move from active to active: only a paused subscription can be resumed")},
		{name: "charge transition", err: &fsm.TransitionError{Machine: "charge", From: "declined", To: "scheduled"},
			status: 409, body: transition("charge cannot move from declined to scheduled")},
		{name: "bill transition", err: &fsm.TransitionError{Machine: "bill", From: "paid", To: "withdrawn", Reason: "it is paid"},
			status: 409, body: transition("bill cannot move from paid to withdrawn: it is paid")},
		{name: "transition behind context",
			err:    fmt.Errorf("move subscription to paused: %w", &fsm.TransitionError{Machine: "subscription", From: "paused", To: "paused"}),
			status: 409, body: transition("subscription cannot move from paused to paused")},
		{name: "endpoint disabled", err: notify.ErrEndpointDisabled,
			status: 409, body: transition("the webhook endpoint is disabled: enable it first")},
		{name: "retry refused",
			err:    fmt.Errorf("%w: the issuer reported this card stolen_card; send a different card", charges.ErrRetryRefused),
			status: 409, body: transition("retry refused: the issuer reported this card stolen_card; send a different card")},
		{name: "registry not configured", err: autopay.ErrRegistryNotConfigured,
			status: 409, body: `{"type":"https://rebill.dev/problems/registry-not-configured","title":"Registry not configured","status":409,"detail":"No state payment registry is configured, so fines cannot be paid: a fine is paid only once the registry accepted its payment. Nothing was created."}` + "\n"},
		{name: "enrollment exists", err: &enrollments.ExistsError{ID: id},
			status: 409, body: `{"type":"https://rebill.dev/problems/enrollment-exists","title":"Enrollment exists","status":409,"detail":"The customer already has an enrollment of this kind for this account (the same ELS, or a shared STS or driving licence) that is not cancelled: enrollment_id names it. Change that one, or cancel it first.","enrollment_id":"0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d"}` + "\n"},
		{name: "bill conflict", err: enrollments.ErrBillConflict,
			status: 409, body: `{"type":"https://rebill.dev/problems/bill-conflict","title":"Bill conflict","status":409,"detail":"A bill with this bill_id exists with a different amount or dates; the issuer must send a new bill_id."}` + "\n"},
		{name: "velocity limit", err: &velocity.ExceededError{Limit: velocity.Creations, Max: 3, RetryAfter: 90*time.Second + time.Millisecond},
			status: 429, retryAfter: "91", body: `{"type":"https://rebill.dev/problems/velocity-limit","title":"Velocity limit","status":429,"detail":"velocity limit creations: at most 3 per hour; retry in 1m30.001s"}` + "\n"},
		{name: "gateway unreachable", // wrapping a timeout, which alone would be the database's
			err:    fmt.Errorf("%w: look up charge %s at %s: %w", charges.ErrGatewayUnreachable, id, "sim1", context.DeadlineExceeded),
			status: 503, retryAfter: "5", body: `{"type":"https://rebill.dev/problems/gateway-unavailable","title":"Gateway unavailable","status":503,"detail":"The payment gateway could not be asked what the charge's last attempt did, so nothing was done. Retry later with the same Idempotency-Key."}` + "\n"},
	}
}

// infrastructureFailures are errors no domain package makes: the
// database's, and defects.
func infrastructureFailures() []failCase {
	unavailable := `{"type":"https://rebill.dev/problems/service-unavailable","title":"Service unavailable","status":503,"detail":"The database is unreachable; nothing was executed. Retry later with the same Idempotency-Key."}` + "\n"
	internal := `{"type":"https://rebill.dev/problems/internal-error","title":"Internal error","status":500,"detail":"The request failed; it was not applied. Retry with the same Idempotency-Key."}` + "\n"
	return []failCase{
		{name: "pool closed", err: fmt.Errorf("begin: %w", puddle.ErrClosedPool),
			status: 503, retryAfter: "1", logged: "database unavailable", body: unavailable},
		{name: "server shutting down", err: fmt.Errorf("insert charge: %w", &pgconn.PgError{Code: "57P01"}),
			status: 503, retryAfter: "1", logged: "database unavailable", body: unavailable},
		{name: "statement refused", err: fmt.Errorf("insert charge: %w", &pgconn.PgError{Code: "23505", Message: "duplicate key"}),
			status: 500, logged: "request failed", body: internal},
		{name: "defect", err: errors.New("nil map"), status: 500, logged: "request failed", body: internal},
		// Its text says what it is, but without a code the API cannot know.
		{name: "domain error without a code", err: fmt.Errorf("cancel: %w", errors.New("widget not found")),
			status: 500, logged: "request failed", body: internal},
		// A code no edge knows is a defect too, not a guess.
		{name: "unknown code", err: fault.New("teapot", "short and stout"),
			status: 500, logged: "request failed", body: internal},
	}
}

func runFail(t *testing.T, c failCase) {
	t.Helper()
	var logs bytes.Buffer
	s := &Server{Deps: Deps{Logger: zerolog.New(&logs)}}
	rec := httptest.NewRecorder()
	s.fail(rec, httptest.NewRequest(http.MethodPost, "/v1/things", nil), c.err)
	require.Equal(t, c.status, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	require.Equal(t, c.body, rec.Body.String())
	require.Equal(t, c.retryAfter, rec.Header().Get("Retry-After"))
	if c.logged == "" {
		require.Empty(t, logs.String(), "a refusal is the caller's business, not the operator's")
		return
	}
	require.Contains(t, logs.String(), `"message":"`+c.logged+`"`)
	require.Contains(t, logs.String(), `"error":"`+c.err.Error()+`"`, "the details go to the log")
	require.NotContains(t, rec.Body.String(), c.err.Error(), "and only there")
}

// Every error a domain package hands the API gets the problem clients
// have always seen, byte for byte, and it gets it through its code.
func TestProblemOfEveryDomainError(t *testing.T) {
	t.Parallel()
	for _, c := range domainFailures() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.NotEmpty(t, fault.CodeOf(c.err), "a domain error carries a code")
			runFail(t, c)
		})
	}
}

// What has no code is a 500 with its details in the log only, whatever
// its text says; an unreachable database is a 503 the caller retries.
func TestProblemOfErrorsWithoutCode(t *testing.T) {
	t.Parallel()
	for _, c := range infrastructureFailures() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runFail(t, c)
		})
	}
}

// The refusals that a later request with the same Idempotency-Key may get
// past are not stored under it; every other refusal is.
func TestUnstoredRefusals(t *testing.T) {
	t.Parallel()
	unstored := map[string]bool{"registry not configured": true, "enrollment exists": true}
	for _, c := range domainFailures() {
		require.Equal(t, unstored[c.name], answerFor(c.err).unstored, c.name)
	}
}

// Every code has an answer, and every answer is a problem type the OpenAPI
// document lists with that status.
func TestEveryCodeHasADocumentedProblem(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.For(openAPIDocument)
	require.NoError(t, err)
	for _, code := range fault.Codes {
		fa, ok := fault.Answers[code]
		require.True(t, ok, "no answer for %s", code)
		a := answerOf(code, fa)
		slug := strings.TrimPrefix(a.problem.Type, problemBase)
		require.Equal(t, a.problem.Status, doc.Problems()[slug], "%s answers %s", code, slug)
	}
	for _, c := range append(domainFailures(), infrastructureFailures()...) {
		p := answerFor(c.err).problem
		slug := strings.TrimPrefix(p.Type, problemBase)
		require.Equal(t, p.Status, doc.Problems()[slug], "%s answers %s", c.name, slug)
	}
}

// A domain error the API has never seen is answered by its code alone: a
// new error needs no new case here. Context that callers put in front
// stays out of the detail; what the domain appended is kept.
func TestNewDomainErrorIsAnsweredByItsCode(t *testing.T) {
	t.Parallel()
	newErr := func(code fault.Code, text string) error {
		return fmt.Errorf("widget 7: %w", fmt.Errorf("%w: it is locked", fault.New(code, text)))
	}
	for _, c := range []failCase{
		{name: "invalid", err: newErr(fault.Invalid, "the widget is too wide"),
			status: 400, body: `{"type":"https://rebill.dev/problems/validation-error","title":"Invalid request","status":400,"detail":"The request has invalid fields.","errors":[{"field":"","message":"the widget is too wide: it is locked"}]}` + "\n"},
		{name: "not found", err: newErr(fault.NotFound, "widget not found"),
			status: 404, body: `{"type":"https://rebill.dev/problems/not-found","title":"Not found","status":404,"detail":"No such resource."}` + "\n"},
		{name: "conflict", err: newErr(fault.Conflict, "the widget cannot turn"),
			status: 409, body: `{"type":"https://rebill.dev/problems/invalid-transition","title":"Invalid transition","status":409,"detail":"the widget cannot turn: it is locked"}` + "\n"},
		{name: "forbidden", err: newErr(fault.Forbidden, "not your widget"),
			status: 403, body: `{"type":"https://rebill.dev/problems/forbidden","title":"Forbidden","status":403,"detail":"A customer key can only create and list its own customer's subscriptions."}` + "\n"},
		{name: "unavailable", err: newErr(fault.Unavailable, "the widget store is down"),
			status: 503, retryAfter: "1", logged: "database unavailable",
			body: `{"type":"https://rebill.dev/problems/service-unavailable","title":"Service unavailable","status":503,"detail":"The database is unreachable; nothing was executed. Retry later with the same Idempotency-Key."}` + "\n"},
		{name: "limited", err: newErr(fault.Limited, "too many widgets"),
			status: 429, body: `{"type":"https://rebill.dev/problems/velocity-limit","title":"Velocity limit","status":429,"detail":"too many widgets: it is locked"}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runFail(t, c)
		})
	}
}

// One table, both edges: for every fault code (and the errors whose
// answer says more than their code), the API's problem and the console's
// page answer with the same status, and the problem's type and title are
// the table's (fault.Answers). The console's sentence is for people: it
// never carries an internal error's text.
func TestOneErrorMappingForAPIAndConsole(t *testing.T) {
	t.Parallel()
	internal := errors.New(`dial tcp 10.0.0.7:5432: connect: connection refused at https://db.internal/`)
	for _, c := range []struct {
		name    string
		err     error
		status  int
		slug    string
		console string // what the console says, exactly
	}{
		{"invalid", fmt.Errorf("%w: evidence is required", fault.New(fault.Invalid, "bad input")), 400, "validation-error",
			"Not done: bad input: evidence is required."},
		{"fields", rebilltype.Errors{{Field: "resume_at", Message: "must be in the future"}}, 400, "validation-error",
			"Not done: resume_at must be in the future."},
		{"not found", fmt.Errorf("get: %w", subscriptions.ErrNotFound), 404, "not-found",
			"Not found: there is no such object, or this key may not see it."},
		{"conflict", &fsm.TransitionError{Machine: "subscription", From: "active", To: "active", Reason: "only a paused subscription can be resumed"},
			409, "invalid-transition", "Not done: subscription cannot move from active to active: only a paused subscription can be resumed."},
		{"refused retry (decision 11)", fmt.Errorf("%w: the issuer reported this card stolen_card; send a different card", charges.ErrRetryRefused),
			409, "invalid-transition", "Not done: retry refused: the issuer reported this card stolen_card; send a different card."},
		{"forbidden", usecases.ErrForbidden, 403, "forbidden", "This key may not do that."},
		{"database unavailable", fmt.Errorf("begin: %w", puddle.ErrClosedPool), 503, "service-unavailable",
			"Not done: the database could not be reached, so nothing was changed. Try again in a moment."},
		{"unavailable code", fmt.Errorf("read: %w", fault.New(fault.Unavailable, "store down")), 503, "service-unavailable",
			"Not done: the database could not be reached, so nothing was changed. Try again in a moment."},
		{"limited", &velocity.ExceededError{Limit: velocity.Creations, Max: 3, RetryAfter: 90 * time.Second}, 429, "velocity-limit",
			"Not done, over a limit: velocity limit creations: at most 3 per hour; retry in 1m30s."},
		{"gateway unreachable", fmt.Errorf("%w: look up: %w", charges.ErrGatewayUnreachable, internal), 503, "gateway-unavailable",
			"Not done: the payment gateway could not be asked what the charge's last attempt did, so nothing was done. Try again later."},
		{"defect", fmt.Errorf("scan: %w", internal), 500, "internal-error",
			"Something went wrong; nothing was changed. Try again, or ask an engineer to look at the logs."},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := answerFor(c.err)
			require.Equal(t, c.status, a.problem.Status, "API status")
			require.Equal(t, problemBase+c.slug, a.problem.Type, "API problem type")
			if code, fa := fault.AnswerTo(c.err); fa.Type == c.slug {
				require.Equal(t, fa.Title, a.problem.Title, "the table's title (%s)", code)
			}
			status, message := console.Explain(c.err)
			require.Equal(t, c.status, status, "the console answers with the API's status")
			require.Equal(t, c.console, message)
			require.NotContains(t, message, "10.0.0.7")
			require.NotContains(t, message, "https://")
		})
	}
	for _, code := range fault.Codes {
		status, _ := console.Explain(fault.New(code, "x"))
		require.Equal(t, fault.Answers[code].Status, status, "%s: the console's status is the table's", code)
		require.Equal(t, fault.Answers[code].Status, answerFor(fault.New(code, "x")).problem.Status, "%s: the API's status is the table's", code)
	}
}
