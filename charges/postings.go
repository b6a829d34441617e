package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/internal/fsm"
	"github.com/rebill/rebill/internal/pg"
)

// A fine's charge is held, then posted to the state payment registry (GIS
// GMP), then captured: the registry is told only of money that is held,
// and a fine counts as paid only once the registry holds its payment
// under the fine's UIN. This file holds the postings (the
// registry_postings table), their statuses and their machine; poster.go
// and poster_abandon.go the River jobs that drive them through the
// registry port (package charges/registry, whose doc tells how a payment
// id makes a retry a replay).
//
// When the pipeline records a hold of a charge with a UIN it calls
// [Poster.Held], which stores a posting and enqueues its [PostArgs] job in
// the same transaction; the job posts through the registry gateways
// (asynchronously: the registry is not built for synchronous traffic)
// and, once the registry accepted the payment, enqueues the charge's
// capture. A posting that fails for good sends the charge to review, whose
// hold check voids the hold. A posting whose answer was lost is looked up
// by its payment_id before it is sent again. A posting whose money was
// not captured (the hold was voided, the capture failed for good, the
// attempt was superseded) is annulled, an idempotent operation of its
// own: by the sweep, and before a newer attempt of the same charge is
// posted. A payment the registry holds annulled is never captured: its
// hold is released, and a new payment comes only with a new attempt,
// under a new payment_id.
//
// Every allowed move of a posting is listed once, in [PostingMachine]'s table;
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

// PostingStatus is where a posting of a hold to the registry stands.
type PostingStatus string

const (
	// PostingPosting: the hold is placed; the payment is being posted.
	PostingPosting PostingStatus = "posting"
	// PostingAccepted: the registry holds the payment; the capture follows.
	PostingAccepted PostingStatus = "accepted"
	// PostingFailed: the registry never accepted it and never will (it
	// refused it, or, abandoned, holds no such payment); its hold is
	// released (the charge went to review unless it had moved on). Final.
	PostingFailed PostingStatus = "failed"
	// PostingCancelled: not posted, the charge no longer wanted it. Final.
	PostingCancelled PostingStatus = "cancelled"
	// PostingAnnulled: posted, then annulled because its money was not
	// captured, or found annulled at the registry (its money is then
	// never captured). Final.
	PostingAnnulled PostingStatus = "annulled"
	// PostingAbandoned: sent, fate unknown, money released. The hold was
	// released while the registry had not said whether it holds the
	// payment (still processing, an answer lost, the registry out of
	// reach): the job keeps asking, for as long as it takes, and the
	// payment is annulled if the registry accepted it. Not final: it ends
	// annulled, or failed once the registry says it never will accept it.
	PostingAbandoned PostingStatus = "abandoned"
)

// postingTransitions lists, for every status, the statuses a posting may
// move to: the one list of allowed moves, which move checks before its
// guarded UPDATE, and the package doc draws the same graph.
var postingTransitions = map[PostingStatus][]PostingStatus{
	PostingPosting:   {PostingAccepted, PostingFailed, PostingCancelled, PostingAnnulled, PostingAbandoned},
	PostingAccepted:  {PostingAnnulled},
	PostingAbandoned: {PostingAnnulled, PostingFailed},
	PostingFailed:    nil,
	PostingCancelled: nil,
	PostingAnnulled:  nil,
}

// PostingStatuses lists every posting status, in the order of the life
// cycle.
var PostingStatuses = []PostingStatus{PostingPosting, PostingAccepted, PostingAbandoned, PostingFailed, PostingCancelled,
	PostingAnnulled}

// PostingMachine is the posting state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var PostingMachine = fsm.New("registry posting", PostingStatuses, postingTransitions)

// CanPostingTransition reports whether a posting in status from may move to
// status to. Staying in the same status is not a transition.
func CanPostingTransition(from, to PostingStatus) bool { return PostingMachine.Can(from, to) }

type posting struct {
	PaymentID string
	ChargeID  uuid.UUID
	Attempt   int
	UIN       string
	Amount    int64
	Status    PostingStatus
	CreatedAt time.Time
	// UpdatedAt is when it last moved: for an abandoned one, when it was
	// abandoned.
	UpdatedAt time.Time
}

func getPosting(ctx context.Context, db pg.DBTX, paymentID string) (posting, error) {
	var ps posting
	err := db.QueryRow(ctx, `SELECT payment_id, charge_id, attempt, uin, amount, status, created_at, updated_at
		FROM registry_postings WHERE payment_id = $1`, paymentID).
		Scan(&ps.PaymentID, &ps.ChargeID, &ps.Attempt, &ps.UIN, &ps.Amount, &ps.Status, &ps.CreatedAt, &ps.UpdatedAt)
	if err != nil {
		return posting{}, fmt.Errorf("posting %s: %w", paymentID, err)
	}
	return ps, nil
}

// movePosting is the one guarded move of a posting: from one of from to to, each
// a move the table allows (a *fsm.TransitionError, nothing written,
// otherwise); false when it was not in from.
func movePosting(ctx context.Context, db pg.DBTX, paymentID string, from []PostingStatus, to PostingStatus, gateway, lastError string,
	now time.Time) (bool, error) {
	if err := PostingMachine.Check(from, to); err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, `UPDATE registry_postings SET status = $3, gateway = coalesce(nullif($4, ''), gateway),
			last_error = nullif($5, ''), updated_at = $6
		WHERE payment_id = $1 AND status = ANY($2)`, paymentID, fsm.Texts(from), to, gateway, lastError, now)
	if err != nil {
		return false, fmt.Errorf("posting %s to %s: %w", paymentID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}
