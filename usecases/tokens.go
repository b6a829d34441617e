package usecases

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/rebill/rebill/rebilltype"
)

// seal puts pm's token in the vault, in tx, and returns pm holding its
// reference instead: the token is never written to subscriptions or
// charges. The same card gets the same reference, so comparing payment
// methods still tells a change from the same card again.
func (s *Service) seal(ctx context.Context, tx pgx.Tx, pm rebilltype.PaymentMethod) (rebilltype.PaymentMethod, error) {
	if s.Tokens == nil {
		return pm, nil
	}
	ref, err := s.Tokens.Seal(ctx, tx, pm.Gateway, pm.Token)
	if err != nil {
		return rebilltype.PaymentMethod{}, err
	}
	pm.Token = ref
	return pm, nil
}
