// Package gisgmp posts the payments of fines to the state payment
// registry (GIS GMP): a fine counts as paid only once its payment is
// posted there with the fine's UIN.
//
// # Flow
//
// A fine's charge is held, then posted, then captured: the registry is
// told only of money that is held. When the charges pipeline records a
// hold of a charge with a UIN it calls [Poster.Held], which stores a
// posting and enqueues its [PostArgs] job in the same transaction; the job
// posts through the registry gateways (asynchronously: the registry is not
// built for synchronous traffic) and, once the registry accepted the
// payment, enqueues the charge's capture. A posting that fails for good
// sends the charge to review, whose hold check voids the hold.
//
// # Exactly once at the registry
//
// A posting's payment_id is derived from the charge's key, the attempt and
// its amount, so a retry of the same posting (a timeout, a crash, another
// gateway) is a replay the registry recognises, while a full-amount
// attempt after a voided discounted hold is a new payment. A posting whose
// answer was lost is looked up by its payment_id before it is sent again.
// A posting whose money was not captured (the hold was voided, the capture
// failed for good, the attempt was superseded) is annulled, an idempotent
// operation of its own: by the sweep, and before a newer attempt of the
// same charge is posted. A payment the registry holds annulled (a look-up
// or a replay says so) is never captured: its hold is released, and a
// new payment comes only with a new attempt, under a new payment_id.
//
// # Postings
//
// Every allowed move of a posting is listed once, in [Machine]'s table;
// each is a guarded UPDATE (`WHERE status = ANY(from)`), so a job that
// runs twice, or late, changes nothing the second time.
//
//	posting --(the registry took it)--> accepted --(its money not captured)--> annulled
//	posting --(rejected)--> failed
//	posting --(no longer wanted before it was sent)--> cancelled
//	posting --(no longer wanted, but an earlier run's answer was lost)--> accepted | annulled (as the registry shows it)
//	posting --(the registry holds it annulled: never captured)--> annulled
//	posting --(hold released, fate at the registry unknown)--> abandoned
//	abandoned --(the registry accepted it: annulled there; or shows it annulled)--> annulled
//	abandoned --(the registry holds no such payment, or refused it)--> failed
//
// failed, cancelled and annulled are final. abandoned is not: a posting
// whose hold was released while the registry may still accept it (still
// processing past the last moment to post, an answer lost and no look-up
// answered, the registry out of reach past REBILL_UNAVAILABLE_FOR) keeps
// its job asking, snoozed with a growing wait, until the registry says
// what it holds; rebill_registry_postings_abandoned_overdue counts those
// abandoned longer than REBILL_UNAVAILABLE_FOR (alert
// RebillRegistryPostingAbandoned).
//
// # Gateways
//
// The registry is reached through one or more gateways, tried by priority
// and in turn among equals, starting from a rotating one (balancing),
// skipping gateways that failed recently (moving traffic off a degraded
// one) unless all did. A gateway that answers "still processing"
// ([PendingError]) is not degraded: the posting waits and asks again.
package gisgmp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

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
