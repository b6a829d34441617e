// Package charges is the charge pipeline: one charge per subscription
// period, an authorize (hold) and then a capture through the payment
// method's gateway, each a River job with its own gateway idempotency key.
//
// # States
//
//	scheduled -> authorizing -> authorized -> capturing -> succeeded
//	                 |   \            \            \
//	                 |    declined     voided       unknown -> (reconcile)
//	                 |      |  (dunning: new attempt -> scheduled)
//	                 |      failed
//	                 unknown -> (reconcile) -> authorized | declined | failed | requires_review
//
// Every change is a guarded UPDATE (`WHERE status = ANY(from)`), so a job
// that runs twice, or late, changes nothing the second time.
//
// # Gateway keys
//
// A technical retry (timeout, 5xx, crash) repeats the same gateway call
// with the same idempotency key, so the gateway performs it once. Dunning
// makes a new attempt with a new key. An unknown outcome is looked up by
// its key; rebill never creates a replacement operation.
package charges

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Status is where a charge stands.
type Status string

const (
	// Scheduled: created for a due period; its authorize job is enqueued.
	Scheduled Status = "scheduled"
	// Authorizing: the authorize call is about to be or has been sent; a
	// rerun repeats it with the same key.
	Authorizing Status = "authorizing"
	// Authorized: the hold is placed; the capture job is enqueued (or, when
	// the subscription was cancelled meanwhile, the void job).
	Authorized Status = "authorized"
	// Capturing: the capture call is about to be or has been sent.
	Capturing Status = "capturing"
	// Succeeded: captured. Final.
	Succeeded Status = "succeeded"
	// Declined: a soft decline; dunning retries at NextAttemptAt with a new
	// attempt.
	Declined Status = "declined"
	// Failed: a hard decline, a refused request, or dunning exhausted.
	// Final unless the payment method changes.
	Failed Status = "failed"
	// Unknown: the gateway may or may not have acted (timeout, lost
	// response); the reconcile job asks it.
	Unknown Status = "unknown"
	// RequiresReview: automation gave up; a person resolves it with the
	// provider's evidence.
	RequiresReview Status = "requires_review"
	// Voided: the hold was released (or never placed) because the
	// subscription was cancelled. Final.
	Voided Status = "voided"
)

// Phase is the gateway operation that a job or an unknown outcome is about.
type Phase string

// The phases of a charge at its gateway.
const (
	PhaseAuthorize Phase = "authorize"
	PhaseCapture   Phase = "capture"
	PhaseVoid      Phase = "void"
)

// Charge is one period's payment.
type Charge struct {
	ID               uuid.UUID
	SubscriptionID   uuid.UUID
	CustomerID       string
	PeriodKey        string
	PeriodStart      time.Time
	Amount           int64
	Currency         string
	Gateway          string
	Status           Status
	AttemptCount     int
	UnknownPhase     Phase
	AuthorizationRef string
	VoidRequested    bool
	FirstDeclinedAt  *time.Time
	NextAttemptAt    *time.Time
	FailureCode      string
	ReviewReason     string
	CreatedAt        time.Time
	UpdatedAt        time.Time

	token string // the attempt's payment token: sent to the gateway only
}

// Key is the charge's deterministic business key.
func (c Charge) Key() string { return Key(c.SubscriptionID, c.PeriodKey) }

// Key builds the business key `<subscription_id>:<period_key>`.
func Key(subscriptionID uuid.UUID, periodKey string) string {
	return subscriptionID.String() + ":" + periodKey
}

// GatewayKey is the idempotency key of one gateway call: the charge, the
// business attempt and the phase. Technical retries reuse it; a dunning
// attempt gets a new one.
func (c Charge) GatewayKey(phase Phase) string {
	return fmt.Sprintf("%s:a%d:%s", c.Key(), c.AttemptCount, phase)
}

var (
	// ErrNotFound: no charge with that id.
	ErrNotFound = errors.New("charge not found")
	// ErrStale: the charge moved on since the job or request looked at it;
	// the caller's step is already done or no longer applies.
	ErrStale = errors.New("charge state changed")
)

// TransitionError is a change the charge state machine forbids.
type TransitionError struct {
	From Status
	To   Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("charge cannot move from %s to %s", e.From, e.To)
}
