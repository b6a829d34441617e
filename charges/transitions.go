package charges

import "github.com/rebill/rebill/platform/fsm"

// transitions lists, for every status, the statuses a charge may move to.
// It is the one list of allowed moves: every status change in the store
// asks [CanTransition] before it builds its guarded UPDATE, and the package
// doc draws the same graph.
var transitions = map[Status][]Status{
	// The authorize step begins; or the charge is no longer wanted before
	// any call was made (cancelled, its period not owed); or its gateway is
	// not configured.
	Scheduled: {Authorizing, Voided, RequiresReview},
	// The authorize answer; or an unknown outcome; or the attempt that was
	// sent before a cancel is looked up rather than repeated.
	Authorizing: {Authorized, Declined, Failed, Unknown, Voided, RequiresReview},
	// The capture step begins; or the hold is released after a cancel; or
	// a hold at a discounted price was released once the discount ended,
	// and a new attempt at the full price follows (declined, due now).
	Authorized: {Capturing, Voided, Declined, RequiresReview},
	// The capture answer, or an unknown outcome; or the hold expired
	// before the capture: released, it is placed again by a new attempt.
	Capturing: {Succeeded, Unknown, RequiresReview, Scheduled},
	// Dunning or a card change starts a new attempt; the subscription's
	// dunning ends (unpaid); or it is cancelled.
	Declined: {Scheduled, Failed, Voided},
	// A card change or a support retry starts a new attempt.
	Failed: {Scheduled},
	// Reconciliation found the answer, or found nothing and resends the
	// same call (same key), or found nothing and the charge is no longer
	// wanted; or it gave up. A capture found refused because the hold had
	// lapsed starts a new attempt.
	Unknown: {Authorizing, Authorized, Declined, Failed, Capturing, Succeeded, Voided, RequiresReview, Scheduled},
	// A person resolves it, or retries it with a new attempt.
	RequiresReview: {Succeeded, Failed, Scheduled},
	Succeeded:      nil,
	Voided:         nil,
}

// Machine is the charge state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
// The hold is recorded together with its capture's "about to call" in
// one statement when nothing needs to happen between them.
var Machine = fsm.New("charge", Statuses, transitions).Passing(Authorizing, Authorized, Capturing)

// CanTransition reports whether a charge in status from may move to status
// to. Staying in the same status is not a transition.
func CanTransition(from, to Status) bool { return Machine.Can(from, to) }

// PassesThrough reports the status a one-statement move from from to to
// passes through; ok is false when the store makes no such move.
func PassesThrough(from, to Status) (via Status, ok bool) { return Machine.Through(from, to) }

// Statuses lists every status, in the order of the life cycle.
var Statuses = []Status{Scheduled, Authorizing, Authorized, Capturing, Succeeded, Declined, Failed, Unknown,
	RequiresReview, Voided}

// open are the statuses of a charge that automation may still move on its
// own; a charge in one of them is not settled.
var open = []Status{Scheduled, Authorizing, Authorized, Capturing, Declined, Unknown}

// mayHoldMoney are the statuses in which an authorization may exist at the
// gateway that nobody has captured or voided yet.
var mayHoldMoney = []Status{Authorizing, Authorized, Capturing, Unknown}

func in(s Status, set []Status) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}
