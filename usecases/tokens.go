package usecases

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
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

// queuedSeal is seal queued on a batch; its sealing is nil without a
// vault, and then the payment method is kept as it is.
type queuedSeal struct{ sealing *vault.Sealing }

// queueSeal queues seal's statement on b (see vault.Vault.QueueSeal);
// once b is sent in tx, the result's sealed returns what seal would.
func (s *Service) queueSeal(b *pgx.Batch, pm rebilltype.PaymentMethod) (queuedSeal, error) {
	if s.Tokens == nil {
		return queuedSeal{}, nil
	}
	sealing, err := s.Tokens.QueueSeal(b, pm.Gateway, pm.Token)
	return queuedSeal{sealing: sealing}, err
}

// sealed returns pm holding its reference, read in tx.
func (q queuedSeal) sealed(ctx context.Context, tx pgx.Tx, pm rebilltype.PaymentMethod) (rebilltype.PaymentMethod, error) {
	if q.sealing == nil {
		return pm, nil
	}
	ref, err := q.sealing.Ref(ctx, tx)
	if err != nil {
		return rebilltype.PaymentMethod{}, err
	}
	pm.Token = ref
	return pm, nil
}

// limitAndSeal is limit and then seal, in one round trip: a create counts
// its customer's creation and seals its card at once. Over the limit it
// returns the *velocity.ExceededError, whatever the seal that ran after
// the count did (it rolls back with tx); otherwise the first statement
// error, or pm holding its reference.
func (s *Service) limitAndSeal(ctx context.Context, tx pgx.Tx, caller Caller, l velocity.Limit,
	pm rebilltype.PaymentMethod) (rebilltype.PaymentMethod, error) {
	b := &pgx.Batch{}
	taken := s.queueLimit(b, caller, l)
	sealing, err := s.queueSeal(b, pm)
	if err != nil {
		return rebilltype.PaymentMethod{}, err
	}
	if b.Len() > 0 {
		// Each queued statement's reader wraps its own error, and Close
		// returns the first: the statements after a failed one fail only
		// because it did.
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			var exceeded *velocity.ExceededError
			if errors.As(taken.Err(), &exceeded) {
				return rebilltype.PaymentMethod{}, exceeded
			}
			return rebilltype.PaymentMethod{}, err
		}
	}
	if err := taken.Err(); err != nil {
		return rebilltype.PaymentMethod{}, err
	}
	return sealing.sealed(ctx, tx, pm)
}
