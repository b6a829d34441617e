package usecases

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/velocity"
)

// CreateEnrollment validates n and creates the enrollment, its account
// written canonically. Returns rebilltype.Errors, ErrForbidden when a
// customer enrols another customer, or a *enrollments.ExistsError when the
// customer already has that enrollment (not cancelled): a second one would
// only be a second way to pay the same bills.
func (s *Service) CreateEnrollment(ctx context.Context, tx pgx.Tx, caller Caller, n enrollments.New) (enrollments.Enrollment, error) {
	n = n.Canonical()
	if err := n.Validate(s.Clock.Now(), s.KnownGateway); err != nil {
		return enrollments.Enrollment{}, err
	}
	if !caller.canSee(n.CustomerID) {
		return enrollments.Enrollment{}, ErrForbidden
	}
	if n.Kind == enrollments.Fines && (s.Autopay == nil || !s.Autopay.Registry) {
		return enrollments.Enrollment{}, autopay.ErrRegistryNotConfigured
	}
	if err := s.Enrollments.Existing(ctx, tx, n); err != nil {
		return enrollments.Enrollment{}, err
	}
	var err error
	if n.PaymentMethod, err = s.limitAndSeal(ctx, tx, caller, velocity.Creations, n.PaymentMethod); err != nil {
		return enrollments.Enrollment{}, err
	}
	return s.Enrollments.Create(ctx, tx, n)
}

// Enrollment returns an enrollment the caller may see. Returns
// enrollments.ErrNotFound.
func (s *Service) Enrollment(ctx context.Context, caller Caller, id uuid.UUID) (enrollments.Enrollment, error) {
	return s.visibleEnrollment(ctx, nil, caller, id)
}

func (s *Service) visibleEnrollment(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (enrollments.Enrollment, error) {
	e, err := s.Enrollments.Get(ctx, s.db(tx), id)
	if err == nil && !caller.canSee(e.CustomerID) {
		err = enrollments.ErrNotFound // its existence is not revealed
	}
	return e, err
}

// ListEnrollments lists enrollments newest first; a customer lists its own.
// Returns ErrForbidden when a customer asks for another customer's.
func (s *Service) ListEnrollments(ctx context.Context, caller Caller, p enrollments.ListParams) ([]enrollments.Enrollment, error) {
	if caller.CustomerID != "" {
		if p.CustomerID != "" && p.CustomerID != caller.CustomerID {
			return nil, ErrForbidden
		}
		p.CustomerID = caller.CustomerID
	}
	return s.Enrollments.List(ctx, s.Pool, p)
}

// PauseEnrollment keeps the enrollment's bills pending until resume.
// Pausing a paused one returns it unchanged; a cancelled one is a
// *fsm.TransitionError.
func (s *Service) PauseEnrollment(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (enrollments.Enrollment, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Enrollment{}, err
	}
	return s.Autopay.Pause(ctx, tx, id)
}

// ResumeEnrollment schedules its pending bills again; those due are
// charged at once (enqueued in tx).
func (s *Service) ResumeEnrollment(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (enrollments.Enrollment, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Enrollment{}, err
	}
	return s.Autopay.Resume(ctx, tx, id)
}

// CancelEnrollment ends it: nothing more is charged and held money is
// released (void jobs enqueued in tx).
func (s *Service) CancelEnrollment(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID) (enrollments.Enrollment, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Enrollment{}, err
	}
	return s.Autopay.Cancel(ctx, tx, id)
}

// ChangeEnrollmentPaymentMethod validates pm and gives it to the
// enrollment; its declined or failed bills still payable are retried at
// once. Returns rebilltype.Errors, a *fsm.TransitionError for a
// cancelled enrollment, or an error wrapping charges.ErrRetryRefused.
func (s *Service) ChangeEnrollmentPaymentMethod(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID,
	pm rebilltype.PaymentMethod) (enrollments.Enrollment, error) {
	if err := pm.Validate(s.Clock.Now(), s.KnownGateway); err != nil {
		return enrollments.Enrollment{}, err
	}
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Enrollment{}, err
	}
	pm, err := s.seal(ctx, tx, pm)
	if err != nil {
		return enrollments.Enrollment{}, err
	}
	e, changed, err := s.Autopay.ChangePaymentMethod(ctx, tx, id, pm)
	if err != nil || !changed { // the same card again is a retry, not a change
		return e, err
	}
	return e, s.limit(ctx, tx, caller, velocity.PaymentMethodChanges)
}

// PushBill stores a bill an issuer sent for the enrollment (and charges it
// at once when due). created is false when the bill was there already
// with the same content. Returns rebilltype.Errors,
// enrollments.ErrBillConflict, or a *fsm.TransitionError for a
// cancelled enrollment.
func (s *Service) PushBill(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, in enrollments.BillInput) (enrollments.Bill, bool, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Bill{}, false, err
	}
	return s.Autopay.Push(ctx, tx, id, in)
}

// Bills lists a visible enrollment's bills newest first.
func (s *Service) Bills(ctx context.Context, caller Caller, id, before uuid.UUID, limit int) ([]enrollments.Bill, error) {
	if _, err := s.visibleEnrollment(ctx, nil, caller, id); err != nil {
		return nil, err
	}
	return s.Enrollments.ListBills(ctx, s.Pool, id, before, limit)
}

// ConfirmBill records the customer's consent to a bill above max_amount.
// Returns enrollments.ErrBillNotFound or a *fsm.TransitionError.
func (s *Service) ConfirmBill(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, billID string) (enrollments.Bill, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Bill{}, err
	}
	return s.Autopay.Confirm(ctx, tx, id, billID)
}

// WithdrawBill marks a bill the issuer annulled; it is never charged.
// Returns enrollments.ErrBillNotFound or a *fsm.TransitionError.
func (s *Service) WithdrawBill(ctx context.Context, tx pgx.Tx, caller Caller, id uuid.UUID, billID string) (enrollments.Bill, error) {
	if _, err := s.visibleEnrollment(ctx, tx, caller, id); err != nil {
		return enrollments.Bill{}, err
	}
	return s.Autopay.Withdraw(ctx, tx, id, billID)
}

// EnrollmentCharges lists a visible enrollment's bill charges newest
// first.
func (s *Service) EnrollmentCharges(ctx context.Context, caller Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error) {
	if _, err := s.visibleEnrollment(ctx, nil, caller, id); err != nil {
		return nil, err
	}
	return charges.ListByEnrollment(ctx, s.Pool, id, before, limit)
}
