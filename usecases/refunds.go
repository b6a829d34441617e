package usecases

import (
	"context"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/rebilltype"
)

// maxEvidence bounds a refund's note: a sentence or a ticket reference,
// not a document.
const maxEvidence = 1000

// RefundCharge asks for a refund of a succeeded charge the caller may see
// (the API lets only support and admin ask): the amount (0: all that is
// left) is reserved and the refund stored, pending, with its send job, in
// tx. Returns rebilltype.Errors for a bad reason, amount or evidence;
// charges.ErrNotFound; charges.ErrNotRefundable, ErrFineNotRefundable or
// a *charges.RefundExceedsError (409).
func (s *Service) RefundCharge(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, in RefundInput) (charges.Refund, error) {
	var errs rebilltype.Errors
	if !in.Reason.Valid() {
		errs.Add("reason", "must be one of duplicate, fraudulent, requested_by_customer")
	}
	if in.Amount != nil && *in.Amount <= 0 {
		errs.Add("amount", "must be a positive integer in minor units, or left out for all that is left")
	}
	if utf8.RuneCountInString(in.Evidence) > maxEvidence {
		errs.Add("evidence", "must be at most %d characters", maxEvidence)
	}
	if err := errs.Err(); err != nil {
		return charges.Refund{}, err
	}
	if _, err := s.visibleCharge(ctx, tx, caller, id); err != nil {
		return charges.Refund{}, err
	}
	req := charges.RefundRequest{ChargeID: id, Reason: in.Reason, Actor: in.Actor, Evidence: in.Evidence}
	if in.Amount != nil {
		req.Amount = *in.Amount
	}
	return s.Renewals.Charges.RequestRefund(ctx, tx, req, s.Clock.Now())
}

// RefundInput is a refund as a person asks for it.
type RefundInput struct {
	// Amount in minor units; nil for all that is left.
	Amount   *int64
	Reason   charges.RefundReason
	Evidence string
	// Actor names who asked: role and key id, or the console's user.
	Actor string
}

// ChargeRefunds lists the refunds of a charge the caller may see, in the
// order they were requested, after the refund numbered after.
func (s *Service) ChargeRefunds(ctx context.Context, caller Caller, id uuid.UUID, after int64, limit int) ([]charges.Refund, error) {
	if _, err := s.visibleCharge(ctx, nil, caller, id); err != nil {
		return nil, err
	}
	return charges.RefundsPage(ctx, s.Pool, id, after, limit)
}
