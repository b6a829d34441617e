package charges

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/fault"
)

// newAttempt is the assignment list that starts the next business attempt
// of a charge: a new attempt number (so new gateway keys), due at $1.
const newAttempt = `attempt_count = attempt_count + 1, attempt_due_at = $1,
	attempt_times = attempt_times || $2::timestamptz, unknown_phase = NULL, authorization_ref = NULL`

// DueRetries starts the next dunning attempt of every declined charge
// whose retry time has come: a new attempt number (so a new gateway key),
// status scheduled, with its authorize job enqueued in tx.
func (s *Store) DueRetries(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Charge, error) {
	retried, err := s.move(ctx, tx, transition{from: []Status{Declined}, to: Scheduled,
		set: `attempt_count = attempt_count + 1, attempt_due_at = next_attempt_at, attempt_times = attempt_times || $1::timestamptz,
			unknown_phase = NULL, authorization_ref = NULL`}, now,
		matching(`charges.id IN (SELECT id FROM charges WHERE `+statusInSQL("off_path_status", Declined)+` AND next_attempt_at <= $1
			ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)`), now, limit)
	if err != nil {
		return nil, err
	}
	return retried, s.start(ctx, tx, retried)
}

// Card-network rules on retrying one card: at most SameCardAttempts
// attempts of a charge in SameCardWindow, and none after the issuer said
// the card is lost or stolen.
const (
	SameCardAttempts = 15
	SameCardWindow   = 30 * 24 * time.Hour
)

// lostOrStolen are decline codes after which the same card is never tried
// again.
var lostOrStolen = map[string]bool{"lost_card": true, "stolen_card": true, "pickup_card": true}

// ErrRetryRefused: a retry on the same card is not allowed (card-network
// rules); the wrapped message says which.
var ErrRetryRefused = fault.New(fault.Conflict, "retry refused")

// sameCardRetryAllowed applies the card-network rules to a new attempt of
// c with token at now.
func (c Charge) sameCardRetryAllowed(token string, now time.Time) error {
	if token != c.token {
		return nil
	}
	if lostOrStolen[c.FailureCode] {
		return fmt.Errorf("%w: the issuer reported this card %s; send a different card", ErrRetryRefused, c.FailureCode)
	}
	recent := 0
	for _, at := range c.AttemptTimes {
		if now.Sub(at) < SameCardWindow {
			recent++
		}
	}
	if recent >= SameCardAttempts {
		return fmt.Errorf("%w: %d attempts on this card in %s; send a different card", ErrRetryRefused, recent, SameCardWindow)
	}
	return nil
}

// sameCardAttemptAt is the earliest moment, from now on, at which a new
// attempt of c on the same card keeps to the card-network rules: when
// SameCardAttempts started within SameCardWindow, once the oldest of them
// leaves the window.
func (c Charge) sameCardAttemptAt(now time.Time) time.Time {
	var recent []time.Time
	for _, at := range c.AttemptTimes {
		if now.Sub(at) < SameCardWindow {
			recent = append(recent, at)
		}
	}
	if len(recent) < SameCardAttempts {
		return now
	}
	slices.SortFunc(recent, time.Time.Compare)
	return recent[len(recent)-SameCardAttempts].Add(SameCardWindow)
}

// PaymentMethodChanged applies a new (or the same) payment method to the
// subscription's charges, in tx after the subscription row was locked:
// charges whose attempt has not begun take the new card, and charges that
// wait (declined, failed and unresolved) start a new attempt at once with
// it, oldest first, their authorize jobs enqueued in tx; they are
// returned. Attempts in flight
// keep their card and finish first: a second attempt beside them could
// place a second hold. Returns an error wrapping ErrRetryRefused, and
// changes nothing, when the same card may not be tried again.
func (s *Store) PaymentMethodChanged(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, gateway, token string, now time.Time) ([]Charge, error) {
	return s.paymentMethodChanged(ctx, tx, "subscription_id", subscriptionID, nil, gateway, token, now)
}

// paymentMethodChanged is PaymentMethodChanged for the charges whose
// owner column (subscription_id or enrollment_id) is id; when only is not
// nil, for those of its charges only.
func (s *Store) paymentMethodChanged(ctx context.Context, tx pgx.Tx, owner string, id uuid.UUID, only []uuid.UUID, gateway, token string,
	now time.Time) ([]Charge, error) {
	waiting, err := collect(tx.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE `+owner+` = $1 AND (status = $2 OR (status = $3 AND resolution IS NULL)) AND ($4::uuid[] IS NULL OR id = ANY($4))
		ORDER BY period_start FOR UPDATE`, id, string(Declined), string(Failed), only))
	if err != nil {
		return nil, err
	}
	for _, c := range waiting {
		if err := c.sameCardRetryAllowed(token, now); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE charges SET gateway = $2, pm_token = $3, updated_at = $4
		WHERE `+owner+` = $1 AND status = $5`, id, gateway, token, now, string(Scheduled)); err != nil {
		return nil, fmt.Errorf("new card for scheduled charges: %w", err)
	}
	retried := make([]Charge, 0, len(waiting))
	for _, c := range waiting {
		next, err := oneMoved(s.move(ctx, tx, transition{from: []Status{c.Status}, to: Scheduled,
			set: newAttempt + `, gateway = $3, pm_token = $4, failure_code = NULL, first_declined_at = NULL`}, now,
			byID(c.ID, c.AttemptCount, ""), now, now, gateway, token))
		if err != nil {
			return nil, err
		}
		retried = append(retried, next)
	}
	return retried, s.start(ctx, tx, retried)
}

// RetryFromReview starts a new attempt of a charge in requires_review or
// failed, at a person's request, on the given payment method, and
// enqueues its authorize job in tx. The caller has checked at the gateway
// that the previous attempt holds no money.
// Returns ErrStale when the charge moved on meanwhile, a *fsm.TransitionError
// from any other status, or ErrRetryRefused under card-network rules.
func (s *Store) RetryFromReview(ctx context.Context, tx pgx.Tx, c Charge, gateway, token string, now time.Time) (Charge, error) {
	if c.Status != RequiresReview && c.Status != Failed {
		return Charge{}, Machine.Refuse(c.Status, Scheduled, "")
	}
	if err := c.sameCardRetryAllowed(token, now); err != nil {
		return Charge{}, err
	}
	// A subscription's charge flagged void is of a cancelled subscription
	// or of a period not owed (it began after the dunning ended): no new
	// attempt starts for it.
	if c.VoidRequested && c.EnrollmentID == uuid.Nil {
		return Charge{}, Machine.Refuse(c.Status, Scheduled, "its subscription was cancelled or its period is not owed")
	}
	// An attempt started past a bill's last moment would only be voided
	// before its call: refuse it here, where a person can be told why.
	if c.PayUntil != nil && !now.Before(*c.PayUntil) {
		return Charge{}, fmt.Errorf("%w: the bill's last moment to start an attempt (%s) has passed", ErrRetryRefused,
			c.PayUntil.UTC().Format(time.RFC3339))
	}
	// A bill's charge that no longer holds its bill's identity (released,
	// or the later of two copies) is never charged again: another copy
	// pays the bill.
	next, err := oneMoved(s.move(ctx, tx, transition{from: []Status{RequiresReview, Failed}, to: Scheduled,
		where: "(bill_identity IS NULL OR identity_held) AND (enrollment_id IS NOT NULL OR NOT void_requested)",
		set: newAttempt + `, gateway = $3, pm_token = $4, failure_code = NULL, first_declined_at = NULL, review_reason = NULL, review_code = NULL,
			hold_released_at = NULL, void_requested = false`}, now, byID(c.ID, c.AttemptCount, ""), now, now, gateway, token))
	if errors.Is(err, ErrStale) {
		if held, herr := identityHeld(ctx, tx, c.ID); herr == nil && !held {
			return Charge{}, Machine.Refuse(c.Status, Scheduled, "")
		}
	}
	if err != nil {
		return Charge{}, err
	}
	return next, s.start(ctx, tx, []Charge{next})
}

// identityHeld reports whether the charge may be charged as far as its
// bill's identity goes: it has none, or it holds it.
func identityHeld(ctx context.Context, db DBTX, id uuid.UUID) (bool, error) {
	var held bool
	err := db.QueryRow(ctx, `SELECT bill_identity IS NULL OR identity_held FROM charges WHERE id = $1`, id).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("charge's bill identity: %w", err)
	}
	return held, nil
}

// markWaiting records, without changing the status, that the charge's
// current step waits for its gateway until at, and why.
func markWaiting(ctx context.Context, db DBTX, id uuid.UUID, attempt int, status Status, at time.Time, reason string, now time.Time) error {
	_, err := db.Exec(ctx, `UPDATE charges SET next_attempt_at = $4, failure_code = $5, updated_at = $6
		WHERE id = $1 AND attempt_count = $2 AND status = $3`, id, attempt, string(status), at, reason, now)
	if err != nil {
		return fmt.Errorf("mark charge waiting: %w", err)
	}
	return nil
}
