// Package subscriptions holds the subscription aggregate: its state
// machine, its events log, and its store.
//
// # Transitions
//
// Every allowed move is listed once, in [Machine]'s table; the store
// refuses any other with a *fsm.TransitionError.
//
//	trialing ---(trial_end comes, or ends now)---> active
//	trialing ---cancel---> cancelled
//	active ----pause----> paused ----resume (or resume_at)----> active
//	active ---(a charge declined: dunning)---> past_due
//	active|past_due ---(dunning ended)---> unpaid
//	unpaid ---(card change, a retry on the same card)---> past_due
//	past_due|unpaid ---(what was owed is paid)---> active
//	any but cancelled ---cancel (now, or at period end)---> cancelled (final)
//
// Every status change is a guarded UPDATE in the caller's transaction
// (`WHERE status = ANY(from)`), and appends one [Event] in that
// transaction. A transition whose target is already reached is a no-op
// that writes nothing, so repeated pause, resume and cancel requests
// converge.
package subscriptions

import (
	"sync"
	"time"

	_ "time/tzdata" // zones work on machines without tzdata

	"github.com/google/uuid"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions/period"
)

// Status is where a subscription stands in its life cycle.
type Status string

const (
	// Trialing: before trial_end nothing is charged; the first period
	// begins at trial_end.
	Trialing Status = "trialing"
	// Active: periods are charged as they fall due.
	Active Status = "active"
	// Paused: no period is charged; periods that fall due are skipped, not
	// owed. Charges of periods that began before the pause are still owed
	// and still collected. Resume (by a person, or automatically at
	// resume_at) starts a new period at once once billing has begun.
	Paused Status = "paused"
	// PastDue: a period is unpaid and dunning is retrying it; new periods
	// are still charged. A successful charge returns it to Active.
	PastDue Status = "past_due"
	// Unpaid: dunning gave up. No new period is charged until the payment
	// method changes, and the periods that start meanwhile are not owed.
	Unpaid Status = "unpaid"
	// Cancelled: final. Nothing moves a subscription out of it.
	Cancelled Status = "cancelled"
)

// Event types written to the events log.
const (
	EventCreated              = "created"
	EventPaused               = "paused"
	EventResumed              = "resumed"
	EventCancelled            = "cancelled"
	EventCancelScheduled      = "cancel_scheduled"
	EventPaymentMethodUpdated = "payment_method_updated"
	EventPastDue              = "past_due"
	EventUnpaid               = "unpaid"
	EventReactivated          = "reactivated"
	// EventTrialEnded: trialing -> active, at trial_end (actor system) or
	// ended early by a person.
	EventTrialEnded = "trial_ended"
)

// transitions lists, for every status, the statuses it may move to. It
// is the one list of allowed moves: every status change in the store asks
// [Machine] before its guarded UPDATE.
var transitions = map[Status][]Status{
	Trialing:  {Active, Cancelled},
	Active:    {Paused, PastDue, Unpaid, Cancelled},
	Paused:    {Active, Cancelled},
	PastDue:   {Active, Unpaid, Cancelled},
	Unpaid:    {Active, PastDue, Cancelled},
	Cancelled: nil,
}

// Machine is the subscription state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var Machine = fsm.New("subscription", Statuses, transitions)

// CanTransition reports whether a subscription in status from may move to
// status to. Staying in the same status is not a transition.
func CanTransition(from, to Status) bool { return Machine.Can(from, to) }

var (
	// ErrNotFound: no subscription with that id.
	ErrNotFound = fault.New(fault.NotFound, "subscription not found")
	// ErrCreatedBefore: the id a creation derives from its request
	// (New.ID) is already a subscription's: the request's Idempotency-Key
	// created it, and the key's stored response has expired since.
	ErrCreatedBefore = fault.New(fault.Conflict, "this Idempotency-Key already created a subscription, and its stored response has expired: use a new key to create another")
)

// Subscription is a fixed amount charged every period.
type Subscription struct {
	ID                uuid.UUID
	CustomerID        string
	Status            Status
	Amount            int64
	Currency          string
	Interval          period.Interval
	IntervalCount     int
	TimeZone          string
	BillingAnchor     time.Time
	NextPeriodIndex   int // the period the next charge is for
	NextChargeAt      time.Time
	CancelAtPeriodEnd bool
	PausedAt          *time.Time
	ResumeAt          *time.Time
	PaymentMethod     rebilltype.PaymentMethod
	Description       string
	Metadata          map[string]string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CancelledAt       *time.Time
	// UnpaidSince is when the dunning of an unpaid subscription ended:
	// periods that begin at or after it are not owed.
	UnpaidSince *time.Time
	// Receipt is the fiscal receipt its payments carry; nil when none.
	Receipt *Receipt
	// Experiments are the arms of the experiments the subscription takes
	// part in, by experiment key; once recorded an arm does not change.
	Experiments map[string]string
	// TrialEnd is when a trial ends and the first period begins; nil
	// without a trial.
	TrialEnd *time.Time
	// PendingUpdate is a change that applies at the current period's end;
	// nil when none waits.
	PendingUpdate *PendingUpdate
	// CreditBalance is credit, in minor units of Currency, that reduces the
	// next charges (left by a downgrade's proration).
	CreditBalance int64
	// PeriodKeySuffix ends every period key of the current schedule (see
	// period.Schedule.KeySuffix).
	PeriodKeySuffix string
	// OnResume is what the pause's resume does (or the last pause's did).
	OnResume OnResume
	// PausedTimeLeft is the paid time left in the current period when a
	// pause that continues the period began; nil otherwise.
	PausedTimeLeft *time.Duration
	// pausedPeriodEnd is the end of the period the pause interrupted, as
	// next_charge_at stood when it began; nil for a pause begun before it
	// was recorded.
	pausedPeriodEnd *time.Time
}

// OnResume is what a resume does with the period the pause interrupted.
type OnResume string

const (
	// StartNewPeriod: the resume starts a new period, charged at once.
	StartNewPeriod OnResume = "start_new_period"
	// ContinuePeriod: the paid time left at the pause is kept; the next
	// charge falls that long after the resume.
	ContinuePeriod OnResume = "continue_period"
)

// PendingUpdate is a change of price or plan waiting for the end of the
// current period. Fields left nil keep the subscription's value.
type PendingUpdate struct {
	ID            uuid.UUID        `json:"id"`
	Amount        *int64           `json:"amount,omitempty"`
	Interval      *period.Interval `json:"interval,omitempty"`
	IntervalCount *int             `json:"interval_count,omitempty"`
	Description   *string          `json:"description,omitempty"`
	// Metadata is null when unchanged; {} clears it.
	Metadata map[string]string `json:"metadata"`
	Receipt  *Receipt          `json:"receipt,omitempty"`
	// EffectiveAt is the period end it applies at.
	EffectiveAt time.Time `json:"effective_at"`
	CreatedAt   time.Time `json:"created_at"`
}

// Schedule is the subscription's period arithmetic. The zone was validated
// when the subscription was created; an unloadable one falls back to UTC.
func (s Subscription) Schedule() period.Schedule {
	return period.Schedule{Anchor: s.BillingAnchor, Location: location(s.TimeZone), Interval: s.Interval, Count: s.IntervalCount,
		KeySuffix: s.PeriodKeySuffix}
}

// locations caches loaded zones: time.LoadLocation reads a file each call,
// and a scan computes schedules for thousands of subscriptions.
var locations sync.Map

func location(name string) *time.Location {
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = time.UTC
	}
	locations.Store(name, loc)
	return loc
}

// CurrentPeriod is the last period that was started, or the first one when
// none has started yet.
func (s Subscription) CurrentPeriod() period.Period {
	if s.NextPeriodIndex == 0 {
		return s.Schedule().Period(0)
	}
	return s.Schedule().Period(s.NextPeriodIndex - 1)
}

// Actor is who caused a change: an API key and its role, or the system.
type Actor struct {
	ID   string
	Role string
}

// System is the actor for changes that rebill makes on its own (dunning,
// scheduled resume, cancel at period end).
var System = Actor{ID: "system", Role: "system"}

// Event is one entry of a subscription's events log.
type Event struct {
	ID             int64
	SubscriptionID uuid.UUID
	Type           string
	From           Status // empty for the created event
	To             Status
	Actor          Actor
	At             time.Time
}
