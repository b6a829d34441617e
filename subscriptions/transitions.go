package subscriptions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrResumeAtNotFuture: a pause's resume_at must lie after now.
var ErrResumeAtNotFuture = errors.New("resume_at must be in the future")

// Pause stops charging until Resume, or until resumeAt when it is set.
// Pausing a paused subscription changes nothing. Returns the subscription,
// whether it changed, ErrNotFound or a *TransitionError.
func (st *Store) Pause(ctx context.Context, tx pgx.Tx, id uuid.UUID, resumeAt *time.Time, actor Actor) (Subscription, bool, error) {
	now := st.clock.Now()
	return st.transition(ctx, tx, id, Paused, EventPaused, actor, func(sub Subscription) error {
		if resumeAt != nil && !resumeAt.After(now) {
			return ErrResumeAtNotFuture
		}
		return nil
	}, `paused_at = $3, resume_at = $4`, now, resumeAt)
}

// Resume starts a new period at once: the billing anchor moves to now and
// the first period of the new anchor is due immediately. Resuming an
// active subscription changes nothing.
func (st *Store) Resume(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor Actor) (Subscription, bool, error) {
	return st.ResumeAt(ctx, tx, id, st.clock.Now(), actor)
}

// ResumeAt is Resume with the new period starting at at, which the
// scheduler uses to resume a pause at its resume_at even when it runs late.
func (st *Store) ResumeAt(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time, actor Actor) (Subscription, bool, error) {
	return st.transition(ctx, tx, id, Active, EventResumed, actor, func(sub Subscription) error {
		if sub.Status != Paused {
			return &TransitionError{From: sub.Status, To: Active, Reason: "only a paused subscription can be resumed"}
		}
		return nil
	}, `paused_at = NULL, resume_at = NULL, billing_anchor = $3, next_period_index = 0, next_charge_at = $3`, at.UTC())
}

// Cancel ends the subscription now, or, with atPeriodEnd on an active or
// past-due subscription, when its current period ends. Cancelling twice
// changes nothing; an immediate cancel after a scheduled one cancels now.
func (st *Store) Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID, atPeriodEnd bool, actor Actor) (Subscription, bool, error) {
	now := st.clock.Now()
	if atPeriodEnd {
		sub, err := st.GetForUpdate(ctx, tx, id)
		if err != nil {
			return Subscription{}, false, err
		}
		if sub.Status == Cancelled || sub.CancelAtPeriodEnd {
			return sub, false, nil
		}
		if sub.Status == Active || sub.Status == PastDue {
			sub, err = scan(tx.QueryRow(ctx, `UPDATE subscriptions SET cancel_at_period_end = true, updated_at = $2
				WHERE id = $1 RETURNING `+columns, id, now))
			if err != nil {
				return Subscription{}, false, fmt.Errorf("schedule cancel: %w", err)
			}
			if err := st.appendEvent(ctx, tx, id, EventCancelScheduled, sub.Status, sub.Status, actor, now); err != nil {
				return Subscription{}, false, err
			}
			return sub, true, nil
		}
	}
	return st.transition(ctx, tx, id, Cancelled, EventCancelled, actor, nil,
		`cancelled_at = $3, paused_at = NULL, resume_at = NULL, cancel_at_period_end = false`, now)
}

// ChangePaymentMethod replaces the card. Setting the same card again
// changes nothing. An unpaid subscription becomes past due, so that its
// open charge is retried with the new card and new periods are charged
// again. Returns ErrNotFound or a *TransitionError for a cancelled one.
func (st *Store) ChangePaymentMethod(ctx context.Context, tx pgx.Tx, id uuid.UUID, pm PaymentMethod, actor Actor) (Subscription, bool, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == Cancelled {
		return sub, false, &TransitionError{From: Cancelled, To: Cancelled, Reason: "the subscription is cancelled"}
	}
	if sub.PaymentMethod == pm {
		return sub, false, nil
	}
	to := sub.Status
	if to == Unpaid {
		to = PastDue
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET pm_gateway = $2, pm_token = $3, pm_brand = nullif($4, ''),
			pm_last4 = nullif($5, ''), pm_exp_month = $6, pm_exp_year = $7, status = $8, updated_at = $9
		WHERE id = $1 RETURNING `+columns,
		id, pm.Gateway, pm.Token, pm.Brand, pm.Last4, pm.ExpMonth, pm.ExpYear, to, now))
	if err != nil {
		return Subscription{}, false, fmt.Errorf("update payment method: %w", err)
	}
	if err := st.appendEvent(ctx, tx, id, EventPaymentMethodUpdated, sub.Status, to, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}

// SetStatus moves a subscription to status to on rebill's own account
// (dunning: past_due, unpaid; a paid charge: active). Already being there
// changes nothing.
func (st *Store) SetStatus(ctx context.Context, tx pgx.Tx, id uuid.UUID, to Status, eventType string, actor Actor) (Subscription, bool, error) {
	return st.transition(ctx, tx, id, to, eventType, actor, nil, "")
}

// transition is the one guarded status change: lock the row, return it
// unchanged if it already has status to, refuse what CanTransition
// forbids, else update it (with extra SET clauses whose parameters start
// at $3) and append the event, all in tx.
func (st *Store) transition(ctx context.Context, tx pgx.Tx, id uuid.UUID, to Status, eventType string, actor Actor,
	check func(Subscription) error, extraSet string, extraArgs ...any) (Subscription, bool, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == to {
		return sub, false, nil
	}
	if !CanTransition(sub.Status, to) {
		return sub, false, &TransitionError{From: sub.Status, To: to}
	}
	if check != nil {
		if err := check(sub); err != nil {
			return sub, false, err
		}
	}
	set := "status = $2, updated_at = $" + fmt.Sprint(3+len(extraArgs))
	if extraSet != "" {
		set += ", " + extraSet
	}
	args := append([]any{id, to}, extraArgs...)
	args = append(args, now)
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET `+set+`
		WHERE id = $1 AND status = ANY($`+fmt.Sprint(4+len(extraArgs))+`) RETURNING `+columns,
		append(args, allowedFrom(to))...))
	if errors.Is(err, ErrNotFound) {
		return sub, false, &TransitionError{From: sub.Status, To: to}
	}
	if err != nil {
		return Subscription{}, false, fmt.Errorf("move subscription to %s: %w", to, err)
	}
	if err := st.appendEvent(ctx, tx, id, eventType, sub.Status, to, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}
