// Package charges is the charge pipeline: one charge per subscription
// period, an authorize (hold) and then a capture through the payment
// method's gateway, each a River job with its own gateway idempotency key.
//
// # States
//
// Every allowed move is listed once, in [CanTransition]'s table
// (transitions.go); the store refuses any other. A hold whose capture goes
// on in the same run is recorded together with the capture's "about to
// call", authorizing --> capturing in one statement through authorized
// ([PassesThrough]).
//
//	scheduled --> authorizing --> authorized --> capturing --> succeeded
//	   |  ^          |  |  |           |    |           |
//	   |  |          |  |  +-> unknown <----|-----------+   unknown --(reconcile)--> an answer above,
//	   |  |          |  +--> declined --+   |                        a resend, or voided
//	   |  |          |          |       |   |
//	   |  +----------|----------+-------|---|---- scheduled (dunning, card change)
//	   |  +----------|---- failed <-----+   |     failed --> scheduled (card change, support retry)
//	   +-------------+--------------> voided <--+ (cancel; period not owed)
//	any step in flight --> requires_review --> succeeded | failed (resolve) | scheduled (retry)
//
// In words: a scheduled charge starts its authorize step (authorizing), or
// is voided before any call when nobody wants it any more (the
// subscription was cancelled, the period is not owed). The authorize
// answer makes it authorized, declined (soft: dunning), failed (hard), or
// unknown (no answer: reconcile). An authorized charge is captured, or its
// hold voided after a cancel. Declined and failed charges start a new
// attempt (a new gateway key) on a dunning date, a card change or a
// support retry; a declined charge fails when its subscription's dunning
// ends. A hold that outlived its gateway's hold lifetime before its capture
// is released first and placed again by a new attempt (capturing or
// unknown -> scheduled; see holdexpiry.go): never captured late. Every step that automation cannot finish goes to requires_review,
// where a person resolves it or retries it.
//
// Every change is a guarded UPDATE (`WHERE status = ANY(from)`), so a job
// that runs twice, or late, changes nothing the second time.
//
// # Still wanted
//
// A step that is about to move money (authorize, capture, a resend after a
// lost answer) first asks, in the same guarded UPDATE that records "about
// to call", whether the charge is still wanted with this card: subscription
// events write their verdict onto the charge rows in their own transaction
// (a cancel sets void_requested or voids, a card change gives charges that
// have not started the new token, the end of dunning voids or fails the
// waiting ones), so the guard reads only the charge row and a concurrent
// event is either seen or sees the step in flight.
//
// # Bills
//
// A charge may belong to an autopay enrollment's bill instead of a
// subscription period (EnrollmentID set, PeriodKey the bill id, one per
// bill by a unique index). Its outcomes go to its enrollment (Owners), which
// may fit dunning to the bill's deadlines (OwnerState.NextAttempt). A
// fine's price drops until its discount deadline: the amount is fixed when
// an attempt's hold is first sent (in full from an hour before the
// deadline, when a discounted hold could no longer be posted and captured
// in time), and a discounted hold not captured by the deadline is voided
// and followed by a new attempt at the full price (Charge.FullAmount,
// Charge.DiscountUntil). A fine's hold is posted to the state payment
// registry before its capture (Postings).
//
// # Gateway keys
//
// A technical retry (timeout, 5xx, crash) repeats the same gateway call
// with the same idempotency key, so the gateway performs it once. Dunning
// makes a new attempt with a new key. An unknown outcome is looked up by
// its key; rebill never creates a replacement operation.
package charges

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/fault"
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
	// the subscription was cancelled meanwhile, the void job). With
	// Pipeline.CaptureInline the hold's run moves on to Capturing in the
	// same transaction instead.
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
	// Voided: the hold was released (or never placed) because the charge
	// is no longer wanted: the subscription was cancelled, or the period
	// is not owed. Final.
	Voided Status = "voided"
)

// Charge is one period's payment, or one bill's.
type Charge struct {
	ID uuid.UUID
	// SubscriptionID owns a period's charge; EnrollmentID a bill's (whose
	// PeriodKey is then the bill_id). Exactly one is set.
	SubscriptionID   uuid.UUID
	EnrollmentID     uuid.UUID
	CustomerID       string
	PeriodKey        string
	PeriodStart      time.Time
	Amount           int64
	Currency         string
	Gateway          string
	Status           Status
	AttemptCount     int
	UnknownOp        gateway.Op // the call whose outcome is unknown
	AuthorizationRef string
	VoidRequested    bool
	FirstDeclinedAt  *time.Time
	NextAttemptAt    *time.Time
	FailureCode      string
	// ReviewReason is ReviewCode's sentence, with what the hold check
	// found appended; both are empty until the charge goes to review.
	ReviewReason string
	ReviewCode   ReviewCode
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// OffPathAt is when the charge entered its status, while that status
	// is off the pipeline's hot path (unknown, requires_review, declined,
	// voided, failed); nil otherwise. The review queue is ordered by it.
	OffPathAt *time.Time
	// AttemptDueAt is when the current attempt was due: its creation for
	// the first, the dunning date for later ones.
	AttemptDueAt time.Time
	// AttemptTimes are the starts of every attempt, for card-network
	// retry limits.
	AttemptTimes []time.Time
	// HoldReleasedAt is set when, in review, the gateway showed no capture
	// and any hold was voided: the charge cannot be resolved as succeeded.
	HoldReleasedAt *time.Time
	// Resolved: a person settled it.
	Resolved bool
	// FullAmount and DiscountUntil price a charge whose amount rises at a
	// moment (a fine's discount deadline): Amount is the lower price; an
	// attempt whose hold starts at or after its last discounted start
	// (PostingDiscountMargin before DiscountUntil) is placed for
	// FullAmount, and a lower hold not captured by DiscountUntil is voided
	// and made again at FullAmount. Zero and nil for a fixed price.
	FullAmount    int64
	DiscountUntil *time.Time
	// RegistryUIN, when set, is the payment identifier under which the
	// charge's payment is posted to the state payment registry between
	// its hold and its capture (fines).
	RegistryUIN string
	// AuthorizedAt is when the current attempt's hold was placed (service
	// clock); a hold older than its gateway's HoldLifetime is not captured.
	AuthorizedAt *time.Time
	// MaxAmount, when not zero, caps what an attempt may be sent for
	// without the customer's confirmation (an enrollment's max_amount);
	// ConfirmedAmount raises it to what the customer last confirmed. An
	// attempt above both does not start: the charge stays scheduled with
	// ConfirmationRequired set until a confirmation clears it.
	MaxAmount            int64
	ConfirmedAmount      int64
	ConfirmationRequired bool
	// PayUntil, when set, is the last moment an attempt may start (a
	// bill's expires_at less an hour): a scheduled charge reaching it is
	// voided (bill_expired) instead.
	PayUntil *time.Time
	// PaidOutside is what was paid against the bill outside rebill, as
	// last found (OutsidePayments): Amount and FullAmount are net of it.
	PaidOutside int64
	// SourcePaid is what a fine's bill source last reported paid against
	// it (SourceReported). It is never counted: above PaidOutside, the
	// registry is asked afresh before the next hold, and a disagreement
	// that lasts until the last discounted start goes to review.
	SourcePaid int64
	// AmountRefunded is what its succeeded refunds returned of a captured
	// charge (refunds.go); the charge stays succeeded whatever it is.
	AmountRefunded int64

	outsideChecked int    // the attempt whose payments outside rebill were last asked for
	outsideRecheck bool   // the hold was voided because more was paid outside since
	token          string // the attempt's payment token: sent to the gateway only
	sealed         string // token as the vault seals it, when the attempt's start read it: for the gateway edge only
	receipt        []byte // the fiscal receipt (gateway.Receipt as JSON), nil when none
	experiments    string // the experiment arms that govern it, as the jsonb column's text
}

// Experiments are the arms of the experiments that govern c's policies,
// by experiment key; nil when none. Decoded on demand: most charges are in
// no experiment and most reads of a charge do not ask.
func (c Charge) Experiments() map[string]string {
	if c.experiments == "" || c.experiments == "{}" {
		return nil
	}
	var rec map[string]string
	if err := json.Unmarshal([]byte(c.experiments), &rec); err != nil {
		return nil // the column only ever holds an object of strings
	}
	return rec
}

// Key is the charge's deterministic business key: its owner (the
// subscription or the enrollment) and its period key (or bill id).
func (c Charge) Key() string { return Key(c.OwnerID(), c.PeriodKey) }

// OwnerID is the subscription or enrollment the charge bills.
func (c Charge) OwnerID() uuid.UUID {
	if c.EnrollmentID != uuid.Nil {
		return c.EnrollmentID
	}
	return c.SubscriptionID
}

// discountMissed reports whether c holds (or would hold) the lower price
// of a discount that has ended at now.
func (c Charge) discountMissed(now time.Time) bool {
	return c.DiscountUntil != nil && c.Amount < c.FullAmount && !now.Before(*c.DiscountUntil)
}

// Key builds the business key `<subscription_id>:<period_key>`.
func Key(subscriptionID uuid.UUID, periodKey string) string {
	return subscriptionID.String() + ":" + periodKey
}

// GatewayKey is the idempotency key of one gateway call: the charge, the
// business attempt and the operation. Technical retries reuse it; a dunning
// attempt gets a new one.
func (c Charge) GatewayKey(op gateway.Op) string {
	return fmt.Sprintf("%s:a%d:%s", c.Key(), c.AttemptCount, op)
}

var (
	// ErrNotFound: no charge with that id.
	ErrNotFound = fault.New(fault.NotFound, "charge not found")
	// ErrStale: the charge moved on since the job or request looked at it;
	// the caller's step is already done or no longer applies.
	ErrStale = errors.New("charge state changed")
)
