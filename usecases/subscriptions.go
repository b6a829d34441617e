package usecases

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/velocity"
)

// CreateSubscription validates n and creates the subscription; when its
// first period is due at once, that period's charge is enqueued in tx too.
// Returns rebilltype.Errors, ErrForbidden when a customer creates for
// another customer, or a *velocity.ExceededError.
func (s *Service) CreateSubscription(ctx context.Context, tx pgx.Tx, caller Caller, n subscriptions.New) (subscriptions.Subscription, error) {
	if err := n.Validate(s.Clock.Now(), s.KnownGateway); err != nil {
		return subscriptions.Subscription{}, err
	}
	if !caller.canSee(n.CustomerID) {
		return subscriptions.Subscription{}, ErrForbidden
	}
	var err error
	if n.PaymentMethod, err = s.limitAndSeal(ctx, tx, caller, velocity.Creations, n.PaymentMethod); err != nil {
		return subscriptions.Subscription{}, err
	}
	return s.Renewals.Create(ctx, tx, n, caller.Actor)
}

// Subscription returns a subscription the caller may see. Returns
// subscriptions.ErrNotFound.
func (s *Service) Subscription(ctx context.Context, caller Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	return s.visible(ctx, nil, caller, id)
}

func (s *Service) visible(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	sub, err := s.Subscriptions.Get(ctx, s.db(tx), id)
	if err == nil && !caller.canSee(sub.CustomerID) {
		err = subscriptions.ErrNotFound // its existence is not revealed
	}
	return sub, err
}

// ListSubscriptions lists subscriptions newest first. A customer lists its
// own (an empty CustomerID filter means them). Returns ErrForbidden when a
// customer asks for another customer's.
func (s *Service) ListSubscriptions(ctx context.Context, caller Caller, p subscriptions.ListParams) ([]subscriptions.Subscription, error) {
	if caller.CustomerID != "" {
		if p.CustomerID != "" && p.CustomerID != caller.CustomerID {
			return nil, ErrForbidden
		}
		p.CustomerID = caller.CustomerID
	}
	return s.Subscriptions.List(ctx, s.Pool, p)
}

// Pause stops charging until a resume, or until resumeAt; onResume ("" for
// the default, or to leave a pause's unchanged) is what the resume does
// (subscriptions.Store.Pause). A period that began before the pause is
// owed: one the scan has not reached yet is charged first (enqueued in
// tx), so the time a pause that continues its period keeps is what is
// left of a charged period. Pausing a paused subscription returns it
// unchanged but for a different onResume. Returns rebilltype.Errors for a
// resumeAt not in the future or an unknown onResume.
func (s *Service) Pause(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, resumeAt *time.Time,
	onResume subscriptions.OnResume) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	if err := s.billBegun(ctx, tx, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	sub, _, err := s.Subscriptions.Pause(ctx, tx, id, resumeAt, onResume, caller.Actor)
	return sub, err
}

// billBegun charges, in tx, the periods of the subscription that began
// before now while it was billed and that the scan has not reached yet,
// before a pause or a cancel at period end stops billing them: they are
// owed (and with a cancel scheduled whose period ended, the cancel takes
// effect as the scan would carry it out). A trial whose end has come ends
// first, its first period begun.
func (s *Service) billBegun(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	sub, err := s.Subscriptions.GetForUpdate(ctx, tx, id)
	if err != nil {
		return err
	}
	_, err = s.Renewals.Due(ctx, tx, sub)
	return err
}

// Resume returns a paused subscription to billing; a period that then
// begins is charged at once (enqueued in tx). Resuming an active one
// returns it unchanged.
func (s *Service) Resume(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	sub, changed, err := s.Subscriptions.Resume(ctx, tx, id, caller.Actor)
	if err != nil || !changed {
		return sub, err
	}
	return s.Renewals.Due(ctx, tx, sub)
}

// Cancel ends the subscription now, or at the end of its period (a period
// that has begun is the current one: one the scan has not reached yet is
// charged first, enqueued in tx). An immediate cancel voids what was not
// captured: unstarted charges at once, holds through void jobs enqueued in
// tx. Cancelling twice returns it unchanged.
func (s *Service) Cancel(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, atPeriodEnd bool) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	if atPeriodEnd {
		if err := s.billBegun(ctx, tx, id); err != nil {
			return subscriptions.Subscription{}, err
		}
	}
	sub, changed, err := s.Subscriptions.Cancel(ctx, tx, id, atPeriodEnd, caller.Actor)
	if err == nil && changed && sub.Status == subscriptions.Cancelled {
		err = s.Renewals.Cancelled(ctx, tx, id)
	}
	return sub, err
}

// ChangePaymentMethod validates pm and gives it to the subscription and to
// its charges: those not yet started take it, and those waiting (declined,
// failed) are retried at once, oldest first, also when pm is the card it
// already has (the customer's "try again"). An unpaid subscription whose
// charges are retried becomes past due; a past-due one with nothing left
// to collect becomes active. Returns rebilltype.Errors, or an error wrapping
// charges.ErrRetryRefused when card-network rules forbid trying the same
// card again, or a *velocity.ExceededError for a customer key's change.
func (s *Service) ChangePaymentMethod(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, pm rebilltype.PaymentMethod) (subscriptions.Subscription, error) {
	if err := pm.Validate(s.Clock.Now(), s.KnownGateway); err != nil {
		return subscriptions.Subscription{}, err
	}
	before, err := s.visible(ctx, tx, caller, id)
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	if before.Status == subscriptions.Unpaid && before.UnpaidSince != nil {
		// Leaving unpaid: the periods that began meanwhile stay not owed.
		if err := s.Renewals.Charges.NotOwedSince(ctx, tx, id, *before.UnpaidSince, s.Clock.Now()); err != nil {
			return subscriptions.Subscription{}, err
		}
	}
	if pm, err = s.seal(ctx, tx, pm); err != nil {
		return subscriptions.Subscription{}, err
	}
	sub, changed, err := s.Subscriptions.ChangePaymentMethod(ctx, tx, id, pm, caller.Actor)
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	if changed { // the same card again is a retry, not a change
		if err := s.limit(ctx, tx, caller, velocity.PaymentMethodChanges); err != nil {
			return subscriptions.Subscription{}, err
		}
	}
	retried, err := s.Renewals.Charges.PaymentMethodChanged(ctx, tx, sub.ID, sub.PaymentMethod.Gateway, sub.PaymentMethod.Token, s.Clock.Now())
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	switch {
	case sub.Status == subscriptions.Unpaid && len(retried) > 0:
		sub, _, err = s.Subscriptions.RetryUnpaid(ctx, tx, sub.ID, caller.Actor)
	case sub.Status == subscriptions.PastDue && len(retried) == 0:
		var open bool
		if open, err = charges.HasOpen(ctx, tx, sub.ID); err == nil && !open {
			sub, _, err = s.Subscriptions.SetStatus(ctx, tx, sub.ID, subscriptions.Active, subscriptions.EventReactivated, subscriptions.System)
		}
	}
	return sub, err
}

// Events lists a visible subscription's events log oldest first, after the
// event id after.
func (s *Service) Events(ctx context.Context, caller Caller, id uuid.UUID, after int64, limit int) ([]subscriptions.Event, error) {
	if _, err := s.visible(ctx, nil, caller, id); err != nil {
		return nil, err
	}
	return s.Subscriptions.Events(ctx, s.Pool, id, after, limit)
}

// UpdateSubscription changes a visible subscription's terms now or at its
// period end (subscriptions.Store.Update and renewals.Renewals.Update say
// how), in tx. Staff choose the proration of an immediate change (empty:
// the configured default); a customer key always gets the default, and
// naming another is 400. Returns rebilltype.Errors, subscriptions.ErrNotFound,
// a *fsm.TransitionError, or an error wrapping
// subscriptions.ErrChargeInFlight.
func (s *Service) UpdateSubscription(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, u subscriptions.Update) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	pr := u.Proration
	switch {
	case caller.CustomerID != "" && pr != "" && pr != s.customerProration():
		return subscriptions.Subscription{}, rebilltype.Errors{{Field: "proration",
			Message: "is set by the service for customer keys (" + string(s.customerProration()) + "): leave it out"}}
	case pr == "":
		pr = s.customerProration()
	}
	sub, _, err := s.Renewals.Update(ctx, tx, id, u, pr, caller.Actor)
	return sub, err
}

// customerProration is the configured proration of customer keys'
// changes, charge_now when none is configured.
func (s *Service) customerProration() subscriptions.Proration {
	if s.CustomerProration == "" {
		return subscriptions.ProrationChargeNow
	}
	return s.CustomerProration
}

// RemovePendingUpdate removes the update waiting for a visible
// subscription's period end; without one it returns the subscription
// unchanged.
func (s *Service) RemovePendingUpdate(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	sub, _, err := s.Subscriptions.RemovePendingUpdate(ctx, tx, id, caller.Actor)
	return sub, err
}

// EndTrial ends a visible subscription's trial now: its first period
// begins and is charged at once (enqueued in tx). A trial whose end has
// come ended then, as the scan ends it. Ending the trial of an active
// subscription returns it unchanged; any other status, or a trial with a
// cancel scheduled at its end, is a *fsm.TransitionError.
func (s *Service) EndTrial(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (subscriptions.Subscription, error) {
	if _, err := s.visible(ctx, tx, caller, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	if err := s.billBegun(ctx, tx, id); err != nil {
		return subscriptions.Subscription{}, err
	}
	sub, changed, err := s.Subscriptions.EndTrial(ctx, tx, id, s.Clock.Now(), caller.Actor)
	if err != nil || !changed {
		return sub, err
	}
	return s.Renewals.Due(ctx, tx, sub)
}
