// Package registry is the port to the state payment registry (GIS GMP),
// beside charges/gateway: a fine counts as paid only once its payment is
// posted there with the fine's UIN. It holds what a registry gateway is
// ([Gateway]), what crosses the wire ([Payment], [Quittance],
// [ExportedPayment]), the gateway's errors, the balancing over several
// gateways ([Balancer]) and the payment identifiers ([PaymentIDs]). It
// knows no database and imports no rebill domain package: the postings
// and their state machine, and the poster that drives them between a
// charge's hold and its capture, belong to package charges
// (charges/postings.go). Adapters: agentapi (the HTTP party), sim (the
// simulated gmp1/gmp2); test kit: testkit/agentfake and
// testkit/registrytest, the conformance suite every adapter runs.
//
// # Exactly once at the registry
//
// A posting's payment_id is derived from the charge's key, the attempt and
// its amount, so a retry of the same posting (a timeout, a crash, another
// gateway) is a replay the registry recognises, while a full-amount
// attempt after a voided discounted hold is a new payment. A payment the
// registry holds annulled ([ErrAnnulled]) is never captured, and its
// payment id is never used for another payment.
//
// # Gateways
//
// The registry is reached through one or more gateways, tried by priority
// and in turn among equals, starting from a rotating one (balancing),
// skipping gateways that failed recently (moving traffic off a degraded
// one) unless all did. A gateway that answers "still processing"
// ([PendingError]) is not degraded: the posting waits and asks again.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// DiscountMargin is how long before a discount ends a hold at the
// discounted price is no longer posted: the capture that follows the
// posting must reach the gateway while the discount holds (the margin the
// last discounted attempt keeps, decision 31). Enrollments schedule a
// bill's last discounted start by it.
const DiscountMargin = time.Hour

// Gateway is one way into the registry.
type Gateway interface {
	Name() string
	// Post records a payment. Posting a payment_id the registry holds is
	// a replay: it answers as for the first and records nothing new.
	// Returns ErrUnavailable (nothing was done), ErrUnknownOutcome (the
	// answer was lost), a *PendingError (taken, no outcome yet: not
	// accepted), ErrRejected (the registry refuses it for good), or
	// ErrAnnulled (a replay of a payment the registry holds annulled).
	Post(ctx context.Context, p Payment) error
	// Annul cancels a posted payment; annulling one that is annulled or
	// unknown changes nothing. Returns ErrUnavailable or ErrUnknownOutcome.
	Annul(ctx context.Context, paymentID string) error
	// Lookup tells whether the registry holds the payment (found) and
	// whether it is annulled. Returns ErrUnavailable, or a *PendingError
	// while a post of it has no outcome yet.
	Lookup(ctx context.Context, paymentID string) (found, annulled bool, err error)
	// Quittance lists every payment the registry holds against the
	// accrual uin, annulled ones included: its quittance status, from
	// which rebill tells how much was paid outside it. An accrual the
	// registry does not know has no payments. Returns ErrUnavailable.
	Quittance(ctx context.Context, uin string) (Quittance, error)
}

// Quittance is what the registry holds against one accrual.
type Quittance struct {
	Payments []QuittancePayment
	// Settled: the registry judges the accrual paid in full (GIS GMP's
	// quittance status, which applies the accrual's own rules, such as a
	// fine's discount for payment before its deadline, to the payments'
	// dates). A gateway that cannot tell leaves it false.
	Settled bool
}

// QuittancePayment is one payment the registry holds against an accrual.
type QuittancePayment struct {
	PaymentID string
	Amount    int64
	Annulled  bool
}

// PaidExcept is how much the quittance's payments that stand (not
// annulled) add up to, leaving out those whose payment id own reports as
// rebill's: what was paid outside rebill.
func (q Quittance) PaidExcept(own func(paymentID string) bool) int64 {
	var paid int64
	for _, p := range q.Payments {
		if !p.Annulled && !own(p.PaymentID) {
			paid += p.Amount
		}
	}
	return paid
}

// Payment is what is posted.
type Payment struct {
	PaymentID string
	UIN       string
	Amount    int64
	// PaidAt is when the payer's money was taken (the hold): the payment's
	// date at the registry. Zero: the gateway's own clock.
	PaidAt time.Time
}

var (
	// ErrUnavailable: the gateway did nothing (down, overloaded).
	ErrUnavailable = errors.New("registry gateway unavailable")
	// ErrUnknownOutcome: the call may or may not have been carried out.
	ErrUnknownOutcome = errors.New("registry answer lost")
	// ErrRejected: the registry refuses the payment for good.
	ErrRejected = errors.New("registry rejected the payment")
	// ErrAnnulled: the registry holds the payment annulled (someone
	// annulled it after it was accepted); a replay does not make it stand
	// again, and its payment id is never used for another payment.
	ErrAnnulled = errors.New("registry holds the payment annulled")
)

// PendingError is a gateway's answer that it took the call but has no
// outcome yet (the registry is asynchronous): the payment is not accepted
// until a later call (a replay of the post, or a look-up) says so. It is
// an unknown outcome (errors.Is(err, ErrUnknownOutcome)) whose gateway is
// healthy and says when to ask again.
type PendingError struct {
	Gateway string
	// RetryAfter is how long the gateway asks to be left alone; zero: it
	// did not say.
	RetryAfter time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("%s: still processing at the registry, ask again in %s", e.Gateway, e.RetryAfter)
}

// Is makes a pending answer an unknown outcome.
func (e *PendingError) Is(target error) bool { return target == ErrUnknownOutcome }

// Pending returns err's *PendingError, if it has one.
func Pending(err error) (*PendingError, bool) {
	var pe *PendingError
	ok := errors.As(err, &pe)
	return pe, ok
}

// PaymentID derives the registry's payment identifier of one attempt of a
// charge at one amount: the same for every retry of that posting, new for
// a new attempt or a new amount.
func PaymentID(chargeKey string, attempt int, amount int64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:a%d:%d", chargeKey, attempt, amount))
	return hex.EncodeToString(sum[:16])
}
