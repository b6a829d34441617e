package usecases

import (
	"context"

	"github.com/google/uuid"

	"github.com/rebill/rebill/enrollments"
)

// Bill returns a visible enrollment's bill with the issuer's bill id.
// Returns enrollments.ErrNotFound or enrollments.ErrBillNotFound.
func (s *Service) Bill(ctx context.Context, caller Caller, id uuid.UUID, billID string) (enrollments.Bill, error) {
	if _, err := s.visibleEnrollment(ctx, nil, caller, id); err != nil {
		return enrollments.Bill{}, err
	}
	return s.Enrollments.GetBill(ctx, s.Pool, id, billID)
}
