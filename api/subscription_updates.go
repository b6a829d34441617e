package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

// updateSubscriptionRequest is the body of POST /v1/subscriptions/{id}/update.
// Every field is optional and an absent (or null) one keeps the current
// value, so the pointers tell "not sent" from a zero.
type updateSubscriptionRequest struct {
	Amount        *int64                 `json:"amount"`
	Currency      *string                `json:"currency"`
	Interval      *string                `json:"interval"`
	IntervalCount *int                   `json:"interval_count"`
	Description   *string                `json:"description"`
	Metadata      map[string]string      `json:"metadata"`
	Receipt       *subscriptions.Receipt `json:"receipt"`
	Effective     *string                `json:"effective"`
	Proration     *string                `json:"proration"`
	TrialEnd      *string                `json:"trial_end"`
}

// changesTerms reports whether the body asks for a change of terms, beyond
// ending a trial. A sent currency counts: the use case names it when it is
// not the subscription's own.
func (req updateSubscriptionRequest) changesTerms() bool {
	return req.Amount != nil || req.Currency != nil || req.Interval != nil || req.IntervalCount != nil ||
		req.Description != nil || req.Metadata != nil || req.Receipt != nil
}

// domain checks what can be judged without the subscription (the closed
// sets of effective, proration and trial_end, and that something is asked)
// and returns the update and whether the trial ends now. The terms
// themselves are validated by the use case against the subscription.
// Returns rebilltype.Errors.
func (req updateSubscriptionRequest) domain() (subscriptions.Update, bool, error) {
	var errs rebilltype.Errors
	u := subscriptions.Update{Amount: req.Amount, IntervalCount: req.IntervalCount, Description: req.Description,
		Metadata: req.Metadata, Receipt: req.Receipt, Effective: subscriptions.EffectiveNow}
	if req.Currency != nil {
		u.Currency = *req.Currency
	}
	if req.Interval != nil {
		iv := period.Interval(*req.Interval)
		u.Interval = &iv
	}
	if req.Effective != nil {
		switch e := subscriptions.Effective(*req.Effective); e {
		case subscriptions.EffectiveNow, subscriptions.EffectivePeriodEnd:
			u.Effective = e
		default:
			errs.Add("effective", "must be one of now, period_end")
		}
	}
	if req.Proration != nil {
		switch p := subscriptions.Proration(*req.Proration); p {
		case subscriptions.ProrationNone, subscriptions.ProrationChargeNow, subscriptions.ProrationCreditNext:
			u.Proration = p
		default:
			errs.Add("proration", "must be one of none, charge_now, credit_next")
		}
		if u.Effective == subscriptions.EffectivePeriodEnd {
			errs.Add("proration", "applies only to a change effective now: a change at period end leaves nothing unused to prorate")
		}
	}
	endTrial := false
	if req.TrialEnd != nil {
		if *req.TrialEnd != "now" {
			errs.Add("trial_end", `must be "now"`)
		}
		endTrial = true
	}
	if !endTrial && !req.changesTerms() {
		errs.Add("", "nothing to change: send at least one of amount, currency, interval, interval_count, description, metadata, receipt, trial_end")
	}
	return u, endTrial, errs.Err()
}

// updateSubscription is POST /v1/subscriptions/{id}/update. With
// trial_end "now" the trial ends first; the change of terms, if any, then
// applies to the subscription that ended its trial, and either both or
// neither happen (a refused change must not leave a charged first period
// behind a 409 that is stored and replayed).
func (s *Server) updateSubscription(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, req updateSubscriptionRequest) (subscriptions.Subscription, error) {
		u, endTrial, err := req.domain()
		if err != nil {
			return subscriptions.Subscription{}, err
		}
		ctx, caller := r.Context(), callerFrom(r)
		u.ChangeID = idempotency.CreationID(ctx, "subscription_change:"+id.String())
		if !endTrial {
			return s.Billing.UpdateSubscription(ctx, tx, caller, id, u)
		}
		if !req.changesTerms() {
			return s.Billing.EndTrial(ctx, tx, caller, id)
		}
		return inSavepoint(ctx, tx, func(tx pgx.Tx) (subscriptions.Subscription, error) {
			if _, err := s.Billing.EndTrial(ctx, tx, caller, id); err != nil {
				return subscriptions.Subscription{}, err
			}
			return s.Billing.UpdateSubscription(ctx, tx, caller, id, u)
		})
	})
}

// inSavepoint runs do in a savepoint of tx and keeps its writes only when
// it succeeds: the request's transaction commits refusals too (they are
// stored with the Idempotency-Key), so a request of two steps whose second
// is refused must undo its first.
func inSavepoint(ctx context.Context, tx pgx.Tx, do func(pgx.Tx) (subscriptions.Subscription, error)) (subscriptions.Subscription, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return subscriptions.Subscription{}, fmt.Errorf("begin savepoint: %w", err)
	}
	sub, err := do(sp)
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return subscriptions.Subscription{}, fmt.Errorf("roll back savepoint after %w: %w", err, rbErr)
		}
		return subscriptions.Subscription{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return subscriptions.Subscription{}, fmt.Errorf("release savepoint: %w", err)
	}
	return sub, nil
}

// removePendingUpdate is POST /v1/subscriptions/{id}/pending_update/remove.
// It is a POST, not a DELETE, because the Idempotency-Key middleware and
// the request transaction serve POSTs: every state change of the API goes
// through them.
func (s *Server) removePendingUpdate(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (subscriptions.Subscription, error) {
		return s.Billing.RemovePendingUpdate(r.Context(), tx, callerFrom(r), id)
	})
}
