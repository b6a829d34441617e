// Package gateway is the seam between rebill's charge pipeline and payment
// providers. A Gateway is one provider account; every call carries an
// idempotency key so that a retried call never creates a second operation.
package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Op names a gateway operation.
type Op string

// The operations of a charge: a hold, its capture, or its release; and
// the return of captured money.
const (
	OpAuthorize Op = "authorize"
	OpCapture   Op = "capture"
	OpVoid      Op = "void"
	// OpRefund returns captured money, in full or in part. A payment may
	// have several refunds, each with its own idempotency key.
	OpRefund Op = "refund"
)

// Status is the provider's verdict on an operation that it processed.
type Status string

const (
	// StatusSucceeded: the operation took effect.
	StatusSucceeded Status = "succeeded"
	// StatusDeclined: the issuer refused; see Result.Hard for whether a
	// later attempt may succeed.
	StatusDeclined Status = "declined"
	// StatusFailed: the provider refused the request itself (bad token,
	// capture of an unknown hold); retrying the same request cannot help.
	StatusFailed Status = "failed"
)

// Sentinel errors. Declines are not errors: they come back as a Result.
var (
	// ErrUnavailable: the provider answered that it did nothing (503,
	// connection refused before the request was sent). Retry with the same
	// idempotency key.
	ErrUnavailable = errors.New("gateway unavailable")
	// ErrUnknownOutcome: the request may have been processed but no answer
	// arrived (timeout, connection reset). Look the operation up by its
	// idempotency key before doing anything else.
	ErrUnknownOutcome = errors.New("gateway outcome unknown")
	// ErrNotFound: Lookup found no operation with that idempotency key.
	ErrNotFound = errors.New("gateway operation not found")
	// ErrUnprovable: the provider can no longer say whether it processed
	// the operation (it keeps no index by idempotency key, and the window
	// in which replaying the request under the same key is safe has
	// passed). Neither "done" nor "not done" may be assumed: a person
	// decides.
	ErrUnprovable = errors.New("gateway cannot prove whether the operation happened")
	// ErrKeyReused: the provider refused the call because its idempotency
	// key was first sent with other parameters, and what the key did,
	// looked up, is not what this call asks (another amount): money moved
	// that rebill did not ask for in this form, which a person settles. An
	// adapter answers a refusal whose key's operation is the one asked
	// with that operation's result instead.
	ErrKeyReused = errors.New("gateway idempotency key first used with other parameters")
)

// Request is one operation to perform. Capture and Void name the hold
// through AuthorizationID, the Reference that Authorize returned; Refund
// names the captured payment the same way.
type Request struct {
	IdempotencyKey  string
	Token           string // recurring payment token; never logged
	Amount          int64  // minor units
	Currency        string // ISO 4217
	ChargeKey       string // rebill's business key, for the provider's records
	AuthorizationID string
	Receipt         *Receipt // fiscal receipt, for providers that send one; nil when none
	// RefundReason is why a refund is made, for providers that record one:
	// duplicate, fraudulent or requested_by_customer (Stripe's set, which
	// rebill's refunds take); empty for the other operations.
	RefundReason string
	// Sealed is Token as the vault keeps it, read by the statement that
	// started the attempt, so that the edge that opens Token needs no read
	// of its own; empty when not read. The edge clears it: providers
	// never get it. Never logged.
	Sealed string
}

// Result is the provider's answer for an operation it processed.
type Result struct {
	Op             Op
	IdempotencyKey string
	Reference      string // the provider's id of this operation
	Status         Status
	DeclineCode    string // e.g. "insufficient_funds"; empty unless declined
	Hard           bool   // a hard decline: no retry of this card can succeed
	Amount         int64
	Currency       string
	At             time.Time
	// ExpiresAt is when an authorization lapses unless captured, when the provider says; zero otherwise.
	ExpiresAt time.Time
}

// LookupRequest names an operation whose answer was lost. Providers that
// index operations by idempotency key need only the key; others find it by
// the reference an earlier answer carried (Request.AuthorizationID for a
// capture or void), or replay the very request under the same key, which
// is safe only while the provider still remembers the key: SentAt (no
// later than the first send) bounds that.
type LookupRequest struct {
	Op      Op
	Request Request
	SentAt  time.Time
	// MayReplay allows finding the operation by sending the request again
	// under its key: when the first send never arrived, the replay does
	// what it asks (places the hold). Only callers that would send it, or
	// release what it does, set it; a look that must not move money
	// leaves it unset and gets ErrUnprovable where only a replay could
	// tell.
	MayReplay bool
}

// ByKey is a look-up of op by its idempotency key alone, never replayed:
// what readers (reconciliation, the audit) know of an operation. Providers
// that do not index operations by key answer ErrNotFound or ErrUnprovable
// where they would need the reference or a replay.
func ByKey(op Op, key string) LookupRequest {
	return LookupRequest{Op: op, Request: Request{IdempotencyKey: key}}
}

// Gateway is a payment provider account. Every method is safe to call again
// with the same idempotency key: the provider returns the first result and
// performs nothing new.
type Gateway interface {
	// Name is the configured gateway name that payment methods refer to.
	Name() string
	// Authorize places a hold. Returns ErrUnavailable or ErrUnknownOutcome
	// on technical failure.
	Authorize(ctx context.Context, req Request) (Result, error)
	// Capture collects a hold made by Authorize.
	Capture(ctx context.Context, req Request) (Result, error)
	// Void releases a hold that was not captured.
	Void(ctx context.Context, req Request) (Result, error)
	// Refund returns req.Amount of a captured payment: req.AuthorizationID
	// is the Reference of its Authorize (as Capture names it),
	// req.IdempotencyKey the refund's own key, req.Receipt the refund
	// receipt when the payment had one. Several refunds of one payment
	// are allowed while their sum stays within the capture; the provider
	// refuses (StatusFailed) more. Returns ErrUnavailable or
	// ErrUnknownOutcome on technical failure, like the others.
	Refund(ctx context.Context, req Request) (Result, error)
	// Lookup reports what happened to the operation sent as req (a refund
	// with Op OpRefund, found by its key). Returns
	// ErrNotFound when the provider never processed it, ErrUnprovable when
	// the provider can no longer tell.
	Lookup(ctx context.Context, req LookupRequest) (Result, error)
	// Operations lists every operation the provider processed on the UTC
	// day that contains day, refunds included, oldest first, for
	// reconciliation.
	Operations(ctx context.Context, day time.Time) ([]Result, error)
}

// Transport is the HTTP transport of an adapter that is given none: one
// that keeps a connection open for each call in flight. rebill keeps as
// many calls in flight as it has charge workers (hundreds, sized by
// Little's law); net/http's default keeps 100 idle connections in all and
// 2 per host, so nearly every call would open a connection and close it.
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no bound in all; the bound per host applies
	t.MaxIdleConnsPerHost = maxIdlePerProvider
	return t
}

// maxIdlePerProvider bounds the idle connections kept to one provider:
// above any worker count a node is configured with in practice.
const maxIdlePerProvider = 4096
