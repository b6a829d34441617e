// Package usecases is what clients and support staff ask of rebill: the use
// cases behind the HTTP API. Each composes the domain packages in the
// caller's transaction (the request's, which also stores its idempotent
// response): a subscription and the charge its first period needs, a
// cancel and the voids it causes, a card change and the retries it starts.
// Business rules live in the domain packages; this package decides who may
// do what and in which order things happen.
//
// # Errors
//
// Every use case returns, besides unexpected errors: rebilltype.Errors for
// bad input (every field at fault), ErrForbidden when the caller may not
// act for that customer, subscriptions.ErrNotFound or charges.ErrNotFound
// for an object that does not exist or that the caller may not see, and a
// *fsm.TransitionError for a change any state machine forbids. Each doc
// comment lists what else it returns.
package usecases

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
)

// ErrForbidden: the caller may not act for that customer (a customer key
// creating or listing for another customer).
var ErrForbidden = fault.New(fault.Forbidden, "not allowed for this caller")

// Caller is who asks: the actor that events record and, for a customer
// key, the one customer whose objects it may see and change.
type Caller struct {
	Actor subscriptions.Actor
	// CustomerID limits a customer key to its own objects; empty for
	// staff, who see every customer.
	CustomerID string
}

func (c Caller) canSee(customerID string) bool {
	return c.CustomerID == "" || c.CustomerID == customerID
}

// Attempts tells what a charge's last attempt left at its gateway.
type Attempts interface {
	// LiveMoney describes a capture or a live hold of c's current attempt,
	// empty when there is none. Returns an error wrapping
	// charges.ErrGatewayUnreachable when the gateway cannot tell.
	LiveMoney(ctx context.Context, c charges.Charge) (string, error)
	// AttemptEnded settles, in tx, the declines-limit slot of c's current
	// attempt, which a person ended with outcome (Failed counts as a
	// decline; Succeeded and Scheduled, a retry, give the slot back).
	AttemptEnded(ctx context.Context, tx pgx.Tx, c charges.Charge, outcome charges.Status) error
}

// Service runs the use cases.
type Service struct {
	// Pool serves reads; changes run in the caller's transaction.
	Pool          *pgxpool.Pool
	Subscriptions *subscriptions.Store
	Renewals      *renewals.Renewals
	Attempts      Attempts
	// KnownGateway tells whether a payment method may name a gateway.
	KnownGateway func(name string) bool
	Clock        clock.Clock
	// Enrollments and Autopay are the autopay enrollments and the charging
	// of their bills.
	Enrollments *enrollments.Store
	Autopay     *autopay.Autopay
	// Owners are the charges' owners, as the pipeline reports to them.
	Owners charges.Owners
	// Velocity limits customer keys (nil: no limits).
	Velocity *velocity.Limiter
	// Tokens keeps payment tokens at rest (nil: tokens are stored as
	// given, as in tests of other matters).
	Tokens *vault.Vault
	// CustomerProration is the proration of a customer key's immediate
	// change (REBILL_CUSTOMER_PRORATION); staff choose their own, and get
	// it when they choose none.
	CustomerProration subscriptions.Proration
}

// db is the caller's transaction when there is one, else the pool.
func (s *Service) db(tx pgx.Tx) pg.DBTX {
	if tx != nil {
		return tx
	}
	return s.Pool
}
