package usecases

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
)

// SubscriptionCharges lists a visible subscription's charges newest first,
// before the charge id before (uuid.Nil: from the newest).
func (s *Service) SubscriptionCharges(ctx context.Context, caller Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error) {
	if _, err := s.visible(ctx, nil, caller, id); err != nil {
		return nil, err
	}
	return charges.ListBySubscription(ctx, s.Pool, id, before, limit)
}

// Charge returns a charge the caller may see. Returns charges.ErrNotFound.
func (s *Service) Charge(ctx context.Context, caller Caller, id uuid.UUID) (charges.Charge, error) {
	return s.visibleCharge(ctx, nil, caller, id)
}

func (s *Service) visibleCharge(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (charges.Charge, error) {
	c, err := charges.Get(ctx, s.db(tx), id)
	if err == nil && !caller.canSee(c.CustomerID) {
		err = charges.ErrNotFound
	}
	return c, err
}

// ReviewQueue lists the charges in unknown or requires_review, the longest
// waiting first, after the cursor (nil: from the start).
func (s *Service) ReviewQueue(ctx context.Context, after *charges.ReviewCursor, limit int) ([]charges.Charge, error) {
	return charges.ReviewQueue(ctx, s.Pool, after, limit)
}

// ResolveCharge records a person's verdict on a charge in requires_review
// and tells its subscription (paid: it may recover; failed: it becomes
// unpaid). Returns rebilltype.Errors for a bad resolution, and a
// *fsm.TransitionError from any other status or for succeeded after
// rebill released the charge's hold.
func (s *Service) ResolveCharge(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, r charges.Resolution) (charges.Charge, error) {
	if err := r.Validate(); err != nil {
		return charges.Charge{}, err
	}
	c, err := s.visibleCharge(ctx, tx, caller, id)
	if err != nil {
		return charges.Charge{}, err
	}
	events := s.Owners.Of(c)
	if _, err := events.Lock(ctx, tx, c.OwnerID()); err != nil { // the subscription (or enrollment) before the charge
		return charges.Charge{}, err
	}
	if c, err = s.Renewals.Charges.Resolve(ctx, tx, id, r, s.Clock.Now()); err != nil {
		return charges.Charge{}, err
	}
	if err := s.Attempts.AttemptEnded(ctx, tx, c, c.Status); err != nil {
		return charges.Charge{}, err
	}
	if c.Status == charges.Succeeded {
		return c, s.Renewals.Charges.Paid(ctx, tx, events, c, s.Clock.Now())
	}
	// A person ended the collection now: the subscription is unpaid from
	// now on, not as of the charge's last attempt, which may lie long
	// before, when later periods began while it was active (found by the
	// chaos soak, seed 10).
	failed := c
	failed.AttemptDueAt = s.Clock.Now()
	return c, s.Renewals.Charges.Failed(ctx, tx, events, failed, s.Clock.Now())
}

// RetryCharge starts, at a person's request, a new attempt of a charge in
// requires_review or failed, on its subscription's current payment method,
// with a new gateway key (its authorize job enqueued in tx). It first looks
// the last attempt up at the gateway: a retry must never be a second
// payment, so a capture or a live hold there refuses it. Returns a
// *fsm.TransitionError (another status, money found at the gateway, a
// cancelled subscription, a period not owed, a charge settled by a person or changed
// meanwhile), an error wrapping charges.ErrRetryRefused (card-network
// rules) or charges.ErrGatewayUnreachable (nothing was done; try later).
func (s *Service) RetryCharge(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (charges.Charge, error) {
	c, err := s.visibleCharge(ctx, tx, caller, id)
	if err != nil {
		return charges.Charge{}, err
	}
	refuse := func(reason string) (charges.Charge, error) {
		return charges.Charge{}, charges.Machine.Refuse(c.Status, charges.Scheduled, reason)
	}
	switch {
	case c.Status != charges.RequiresReview && c.Status != charges.Failed:
		return refuse("only a charge in requires_review or failed can be retried")
	case c.Resolved:
		return refuse("a person resolved it")
	}
	found, err := s.Attempts.LiveMoney(ctx, c)
	if err != nil {
		return charges.Charge{}, err
	}
	if found != "" {
		return refuse("the gateway shows " + found + ": resolve it instead")
	}
	owner, err := s.Owners.Of(c).Lock(ctx, tx, c.OwnerID())
	if err != nil {
		return charges.Charge{}, err
	}
	if owner.Cancelled {
		return refuse("the subscription or enrollment is cancelled")
	}
	next, err := s.Renewals.Charges.RetryFromReview(ctx, tx, c, owner.Gateway, owner.Token, s.Clock.Now())
	if errors.Is(err, charges.ErrStale) {
		return refuse("the charge changed meanwhile")
	}
	if err != nil {
		return charges.Charge{}, err
	}
	if err := s.Attempts.AttemptEnded(ctx, tx, c, charges.Scheduled); err != nil {
		return charges.Charge{}, err
	}
	if next.EnrollmentID != uuid.Nil {
		if err := s.Autopay.Retried(ctx, tx, next); err != nil {
			return charges.Charge{}, err
		}
	}
	return next, nil
}
