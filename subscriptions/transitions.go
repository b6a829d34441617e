package subscriptions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
)

// Pause stops charging until Resume, or until resumeAt when it is set.
// onResume is what the resume does: StartNewPeriod (also when empty)
// starts a new period charged at the resume; ContinuePeriod keeps the
// time left until next_charge_at, the end of the period the pause
// interrupts (or, before billing began, the first anchor), and the next
// charge falls that long after the resume. The caller charges the periods
// that began before the pause first (usecases does), so that the time kept
// is what is left of the period charged last: its charge is owed whatever
// the pause. Pausing a paused subscription changes nothing, unless
// onResume is given and differs from the pause's: then it replaces it (see
// repause). Returns the subscription, whether it changed, ErrNotFound, a
// *fsm.TransitionError, or rebilltype.Errors for an unknown onResume, or a
// resumeAt that is not in the future or lies beyond the anchors' horizon.
func (st *Store) Pause(ctx context.Context, tx pgx.Tx, id uuid.UUID, resumeAt *time.Time, onResume OnResume, actor Actor) (Subscription, bool, error) {
	if err := onResume.validate(); err != nil {
		return Subscription{}, false, err
	}
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == Trialing {
		// There is nothing to stop: the table has no such move, and the
		// refusal says what to do instead.
		return sub, false, Machine.Refuse(Trialing, Paused, "a trial charges nothing; cancel it or end it")
	}
	if sub.Status == Paused {
		return st.repause(ctx, tx, sub, onResume, actor)
	}
	if onResume == "" {
		onResume = StartNewPeriod
	}
	// paused_at is stored to the microsecond: the time kept is measured
	// from the stored instant, so that paused_at + kept is next_charge_at
	// exactly and a resume at the pause's instant lands on the period end.
	pausedAt := now.Truncate(time.Microsecond)
	return st.move(ctx, tx, id, Paused, EventPaused, actor, func(sub Subscription) error {
		switch {
		case resumeAt == nil:
		case !resumeAt.After(now):
			return rebilltype.Errors{{Field: "resume_at", Message: "must be in the future"}}
		case resumeAt.After(now.AddDate(AnchorHorizonYears, 0, 0)):
			return rebilltype.Errors{{Field: "resume_at", Message: fmt.Sprintf("must be at most %d years ahead (now is %s)",
				AnchorHorizonYears, now.Format(time.RFC3339))}}
		}
		return nil
	}, `paused_at = $3, resume_at = $4, on_resume = $5, paused_time_left_us = $6, paused_period_end = next_charge_at`,
		pausedAt, resumeAt, onResume, sub.keptMicroseconds(onResume, sub.NextChargeAt, pausedAt))
}

// repause is a pause of a paused subscription. Nothing changes unless
// onResume is given and differs from the pause's: then the pause takes it
// (the time kept is the time that was left when the pause began, so a
// change of mind costs nothing and gains nothing) and records the paused
// event again; resume_at stays. With a cancel scheduled, once the
// interrupted period's end has passed the change is refused either way:
// the cancel has taken effect (start_new_period) or would take effect in
// the past (continue_period to start_new_period).
func (st *Store) repause(ctx context.Context, tx pgx.Tx, sub Subscription, onResume OnResume, actor Actor) (Subscription, bool, error) {
	if onResume == "" || onResume == sub.OnResume {
		return sub, false, nil
	}
	now := st.clock.Now()
	if sub.CancelAtPeriodEnd && !sub.NextChargeAt.After(now) {
		return sub, false, Machine.Refuse(Paused, Paused,
			"the cancel scheduled at period end took effect at "+sub.NextChargeAt.Format(time.RFC3339)+" while paused")
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET on_resume = $2, paused_time_left_us = $3, updated_at = $4
		WHERE id = $1 RETURNING `+columns, sub.ID, onResume, sub.keptMicroseconds(onResume, sub.interruptedPeriodEnd(), *sub.PausedAt), now))
	if err != nil {
		return Subscription{}, false, fmt.Errorf("change the pause's on_resume: %w", err)
	}
	if err := st.changed(ctx, tx, updated, EventPaused, Paused, Paused, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}

// validate accepts the two modes and "" (not given).
func (o OnResume) validate() error {
	switch o {
	case "", StartNewPeriod, ContinuePeriod:
		return nil
	}
	return rebilltype.Errors{{Field: "on_resume", Message: "must be one of start_new_period, continue_period"}}
}

// keptMicroseconds is what a pause at pausedAt keeps for its resume: with
// ContinuePeriod the time until periodEnd, never negative; nil with
// StartNewPeriod.
func (s Subscription) keptMicroseconds(onResume OnResume, periodEnd, pausedAt time.Time) *int64 {
	if onResume != ContinuePeriod {
		return nil
	}
	left := max(periodEnd.Sub(pausedAt), 0).Microseconds()
	return &left
}

// interruptedPeriodEnd is the end of the period a paused subscription's
// pause interrupted: next_charge_at as it stood at the pause, which a
// change of interval while paused has moved since.
func (s Subscription) interruptedPeriodEnd() time.Time {
	if s.pausedPeriodEnd != nil {
		return *s.pausedPeriodEnd
	}
	return s.NextChargeAt
}

// kept is the time a pause that continues its period keeps for the resume.
func (s Subscription) kept() (time.Duration, bool) {
	if s.Status != Paused || s.OnResume != ContinuePeriod || s.PausedTimeLeft == nil {
		return 0, false
	}
	return *s.PausedTimeLeft, true
}

// periodEnded reports whether the period the subscription is in (for a
// paused one, the period its pause interrupted) has ended by at. A pause
// that continues its period stops the period's clock: it ends only after
// the resume.
func (s Subscription) periodEnded(at time.Time) bool {
	if _, ok := s.kept(); ok {
		return false
	}
	return !s.NextChargeAt.After(at)
}

// Resume returns a paused subscription to billing. Resuming an active
// subscription changes nothing. See ResumeAt for where billing resumes.
func (st *Store) Resume(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor Actor) (Subscription, bool, error) {
	return st.ResumeAt(ctx, tx, id, st.clock.Now(), actor)
}

// ResumeAt is Resume as of at, which renewals uses to resume a pause
// at its resume_at even when it runs late.
//
// A pause that continues its period restarts the schedule at at plus the
// time kept: that instant is the new billing anchor and the next charge,
// period index 0. It is at or after the end of the interrupted period,
// whose period was never charged (nothing is charged while paused), and
// every charged period began at least a day (the shortest interval)
// before that end, so the new first period's key, its start date, is
// later than every charged key: nothing is charged twice or skipped. A
// cancel scheduled at period end then falls on the new anchor.
//
// Otherwise, once billing has begun, a new period starts at at and is due
// then. Before the first billing anchor the anchor stands (a pause during
// a trial does not end the trial). With a cancel scheduled at period end,
// the period grid stands too: no new period starts, and the cancel takes
// effect at the current period's end. Returns a *fsm.TransitionError when
// that end passed while paused (the scan cancels it).
func (st *Store) ResumeAt(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time, actor Actor) (Subscription, bool, error) {
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == Paused && sub.CancelAtPeriodEnd && sub.periodEnded(at) {
		return sub, false, Machine.Refuse(Paused, Active,
			"the cancel scheduled at period end took effect at "+sub.NextChargeAt.Format(time.RFC3339)+" while paused")
	}
	check := func(sub Subscription) error {
		if sub.Status != Paused {
			return Machine.Refuse(sub.Status, Active, "only a paused subscription can be resumed")
		}
		return nil
	}
	if kept, ok := sub.kept(); ok {
		return st.move(ctx, tx, id, Active, EventResumed, actor, check,
			`paused_at = NULL, resume_at = NULL, paused_time_left_us = NULL, billing_anchor = $3, next_period_index = 0, next_charge_at = $3`,
			at.Truncate(time.Microsecond).Add(kept).UTC())
	}
	keepGrid := sub.CancelAtPeriodEnd || (sub.NextPeriodIndex == 0 && sub.BillingAnchor.After(at))
	if keepGrid {
		return st.move(ctx, tx, id, Active, EventResumed, actor, check, `paused_at = NULL, resume_at = NULL`)
	}
	return st.move(ctx, tx, id, Active, EventResumed, actor, check,
		`paused_at = NULL, resume_at = NULL, billing_anchor = $3, next_period_index = 0, next_charge_at = $3`, at.UTC())
}

// Cancel ends the subscription now, or, with atPeriodEnd, when its current
// period ends: for an active or past-due subscription, a paused one whose
// period has not ended (a pause that continues its period ends it after
// the resume), or a trialing one, whose trial's end is that end (as for a
// first anchor in the future: nothing is charged). Cancelling twice
// changes nothing; an
// immediate cancel after a scheduled one cancels now.
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
		if sub.Status == Active || sub.Status == PastDue || sub.Status == Trialing || (sub.Status == Paused && !sub.periodEnded(now)) {
			sub, err = scan(tx.QueryRow(ctx, `UPDATE subscriptions SET cancel_at_period_end = true, updated_at = $2
				WHERE id = $1 RETURNING `+columns, id, now))
			if err != nil {
				return Subscription{}, false, fmt.Errorf("schedule cancel: %w", err)
			}
			if err := st.changed(ctx, tx, sub, EventCancelScheduled, sub.Status, sub.Status, actor, now); err != nil {
				return Subscription{}, false, err
			}
			return sub, true, nil
		}
	}
	return st.CancelAt(ctx, tx, id, now, actor)
}

// EndTrial ends a trial as of at: the subscription becomes active and its
// first period begins at at, which becomes its billing anchor and its
// trial_end (earlier than planned when a person ends the trial now). The
// caller charges the period. An active subscription is returned
// unchanged, so ending a trial twice converges. Refused (a
// *fsm.TransitionError): any other status, and a trial with a cancel
// scheduled at its end, which cancels it then with nothing charged.
func (st *Store) EndTrial(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time, actor Actor) (Subscription, bool, error) {
	sub, err := st.GetForUpdate(ctx, tx, id)
	switch {
	case err != nil:
		return Subscription{}, false, err
	case sub.Status == Active:
		return sub, false, nil
	case sub.Status != Trialing:
		return sub, false, Machine.Refuse(sub.Status, Active, "only a trial can end")
	case sub.CancelAtPeriodEnd:
		return sub, false, Machine.Refuse(Trialing, Active,
			"a cancel is scheduled at the trial's end: the subscription is cancelled then, and nothing is charged")
	}
	return st.move(ctx, tx, id, Active, EventTrialEnded, actor, nil,
		`trial_end = $3, billing_anchor = $3, next_period_index = 0, next_charge_at = $3`, at.UTC().Truncate(time.Microsecond))
}

// CancelAt cancels the subscription as of at: now for a request, the end
// of the period for a cancel scheduled at period end.
// A pending update goes with the cancel: it would apply at a period that
// never begins, and a cancelled subscription shows nothing waiting.
func (st *Store) CancelAt(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time, actor Actor) (Subscription, bool, error) {
	sub, changed, err := st.move(ctx, tx, id, Cancelled, EventCancelled, actor, func(sub Subscription) error {
		if sub.PendingUpdate == nil {
			return nil
		}
		return st.removeChange(ctx, tx, sub.PendingUpdate.ID, st.clock.Now())
	}, `cancelled_at = $3, paused_at = NULL, resume_at = NULL, paused_time_left_us = NULL, cancel_at_period_end = false,
		pending_update = NULL`, at.UTC())
	return sub, changed, err
}

// ChangePaymentMethod replaces the card. Setting the same card again
// changes nothing here (changed is false), though the caller may still
// retry waiting charges: the customer says "try again". An unpaid
// subscription becomes past due, so that its open charges are retried
// with the new card and new periods are charged again; the periods that
// started while it was unpaid are not owed and are skipped, billing going
// on along the original anchor grid. Returns ErrNotFound or a
// *fsm.TransitionError for a cancelled one.
func (st *Store) ChangePaymentMethod(ctx context.Context, tx pgx.Tx, id uuid.UUID, pm rebilltype.PaymentMethod, actor Actor) (Subscription, bool, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == Cancelled {
		return sub, false, Machine.Refuse(Cancelled, Cancelled, "the subscription is cancelled")
	}
	if sub.PaymentMethod == pm {
		return sub, false, nil
	}
	if sub.Status == Unpaid {
		// A new card ends the unpaid stop: the same move as a retry, with
		// the card in the same UPDATE.
		index, at := sub.skipStartedPeriods(now)
		return st.move(ctx, tx, id, PastDue, EventPaymentMethodUpdated, actor, nil,
			`pm_gateway = $3, pm_token = $4, pm_brand = nullif($5, ''), pm_last4 = nullif($6, ''), pm_exp_month = $7,
			pm_exp_year = $8, next_period_index = $9, next_charge_at = $10`,
			pm.Gateway, pm.Token, pm.Brand, pm.Last4, pm.ExpMonth, pm.ExpYear, index, at)
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET pm_gateway = $2, pm_token = $3, pm_brand = nullif($4, ''),
			pm_last4 = nullif($5, ''), pm_exp_month = $6, pm_exp_year = $7, updated_at = $8
		WHERE id = $1 RETURNING `+columns,
		id, pm.Gateway, pm.Token, pm.Brand, pm.Last4, pm.ExpMonth, pm.ExpYear, now))
	if err != nil {
		return Subscription{}, false, fmt.Errorf("update payment method: %w", err)
	}
	if err := st.changed(ctx, tx, updated, EventPaymentMethodUpdated, sub.Status, sub.Status, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}

// skipStartedPeriods returns the next period index and its start past
// every period that has begun by now: those began while the subscription
// was unpaid and are not owed.
func (s Subscription) skipStartedPeriods(now time.Time) (int, time.Time) {
	sched := s.Schedule()
	if current := sched.IndexAt(now); current >= s.NextPeriodIndex {
		return current + 1, sched.Start(current + 1)
	}
	return s.NextPeriodIndex, s.NextChargeAt
}

// RetryUnpaid makes an unpaid subscription past due again without a new
// card, when its waiting charges are retried with the same one (the
// customer says "try again"). Like a card change, it skips the periods
// that started while unpaid. Anything but unpaid is left unchanged.
func (st *Store) RetryUnpaid(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor Actor) (Subscription, bool, error) {
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil || sub.Status != Unpaid {
		return sub, false, err
	}
	index, at := sub.skipStartedPeriods(st.clock.Now())
	// transition clears unpaid_since itself when leaving unpaid.
	return st.move(ctx, tx, id, PastDue, EventPastDue, actor, nil,
		`next_period_index = $3, next_charge_at = $4`, index, at)
}

// ReactivateUnpaid makes an unpaid subscription active when what it owed
// was collected without a new card (a support retry that paid, a person's
// resolution). Like a card change, it skips the periods that started
// while unpaid: they are not owed. Anything but unpaid is left unchanged.
func (st *Store) ReactivateUnpaid(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Subscription, bool, error) {
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil || sub.Status != Unpaid {
		return sub, false, err
	}
	index, at := sub.skipStartedPeriods(st.clock.Now())
	return st.move(ctx, tx, id, Active, EventReactivated, System, nil,
		`next_period_index = $3, next_charge_at = $4`, index, at)
}

// MarkUnpaid makes an active or past-due subscription unpaid: its dunning
// ended at since (when the last attempt of its failed charge was due).
// Anything else is left unchanged (changed false).
func (st *Store) MarkUnpaid(ctx context.Context, tx pgx.Tx, id uuid.UUID, since time.Time) (Subscription, bool, error) {
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil || (sub.Status != Active && sub.Status != PastDue) {
		return sub, false, err
	}
	return st.move(ctx, tx, id, Unpaid, EventUnpaid, System, nil, `unpaid_since = $3`, since.UTC())
}

// SetStatus moves a subscription to status to on rebill's own account
// (dunning: past_due, unpaid; a paid charge: active). Already being there
// changes nothing.
func (st *Store) SetStatus(ctx context.Context, tx pgx.Tx, id uuid.UUID, to Status, eventType string, actor Actor) (Subscription, bool, error) {
	return st.move(ctx, tx, id, to, eventType, actor, nil, "")
}

// move is the one guarded status change: lock the row, return it
// unchanged if it already has status to, refuse what the machine forbids
// (Machine.Move), else update it under the move's guard (with extra SET
// clauses whose parameters start at $3) and append the event, all in tx.
func (st *Store) move(ctx context.Context, tx pgx.Tx, id uuid.UUID, to Status, eventType string, actor Actor,
	check func(Subscription) error, extraSet string, extraArgs ...any) (Subscription, bool, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, false, err
	}
	if sub.Status == to {
		return sub, false, nil
	}
	mv, err := Machine.Move(to, sub.Status)
	if err != nil {
		return sub, false, err
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
	if to != Unpaid {
		set += ", unpaid_since = NULL"
	}
	args := append([]any{id, to}, extraArgs...)
	args = append(args, now)
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET `+set+`
		WHERE id = $1 AND status = ANY($`+fmt.Sprint(4+len(extraArgs))+`) RETURNING `+columns,
		append(args, fsm.Texts(mv.From()))...))
	if errors.Is(err, ErrNotFound) {
		return sub, false, Machine.Refuse(sub.Status, to, "")
	}
	if err != nil {
		return Subscription{}, false, fmt.Errorf("move subscription to %s: %w", to, err)
	}
	if err := st.changed(ctx, tx, updated, eventType, sub.Status, to, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}
