package usecases_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/usecases"
	"github.com/rebill/rebill/vault"
	"github.com/rebill/rebill/velocity"
)

// A create counts its creation and seals its card in one round trip, and
// each failure still reads as its own: over the limit the refusal, whatever
// the seal did; a failed seal its own error; a failed count its own, not
// the aborted transaction the seal after it met. Nothing is kept of a
// failed create.
func TestCreateCountsAndSealsWithTheirOwnErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, clk := trialService(t)
	keys, err := secrets.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	svc.Tokens = &vault.Vault{Pool: svc.Pool, Keys: keys}
	svc.Velocity = &velocity.Limiter{Clock: clk, Max: map[velocity.Limit]int{velocity.Creations: 1}}
	_, err = svc.Pool.Exec(ctx, `ALTER TABLE payment_tokens ADD CONSTRAINT test_broken_gateway CHECK (gateway <> 'broken') NOT VALID`)
	require.NoError(t, err)
	customer := usecases.Caller{Actor: subscriptions.Actor{ID: "key-c", Role: "customer"}, CustomerID: "cust-1"}
	create := func(caller usecases.Caller, customerID, gateway, token string) error {
		_, err := trialCall(t, svc, func(tx pgx.Tx) (subscriptions.Subscription, error) {
			return svc.CreateSubscription(ctx, tx, caller, subscriptions.New{CustomerID: customerID, Amount: 1500,
				Currency: "USD", Interval: period.Month, IntervalCount: 1, TimeZone: "UTC",
				PaymentMethod: rebilltype.PaymentMethod{Gateway: gateway, Token: token, ExpMonth: 12, ExpYear: 2035}})
		})
		return err
	}
	count := func(query string) int {
		var n int
		require.NoError(t, svc.Pool.QueryRow(ctx, query).Scan(&n))
		return n
	}
	var exceeded *velocity.ExceededError

	err = create(customer, "cust-1", "broken", "tok_ok")
	require.ErrorContains(t, err, "seal payment token")
	require.False(t, errors.As(err, &exceeded))
	require.Zero(t, count(`SELECT count(*) FROM velocity_counters`), "the failed create counted nothing")

	require.NoError(t, create(customer, "cust-1", "sim1", "tok_ok"))
	err = create(customer, "cust-1", "broken", "tok_ok_2")
	require.True(t, errors.As(err, &exceeded), "over the limit, the refusal, not the seal's error: %v", err)
	err = create(customer, "cust-1", "sim1", "tok_ok_3")
	require.True(t, errors.As(err, &exceeded), "%v", err)
	require.Equal(t, 1, count(`SELECT count(*) FROM subscriptions`))
	require.Equal(t, 1, count(`SELECT count(*) FROM payment_tokens`), "the refused creates sealed nothing")

	staff := usecases.Caller{Actor: subscriptions.Actor{ID: "key-s", Role: "support"}}
	require.NoError(t, create(staff, "cust-1", "sim1", "tok_ok_4"), "staff keys are exempt")
	svc.Tokens = nil
	require.NoError(t, create(staff, "cust-1", "sim1", "tok_clear"), "no vault, no limit: nothing sent before the create")

	_, err = svc.Pool.Exec(ctx, `ALTER TABLE velocity_counters ADD CONSTRAINT test_refuse CHECK (count < 0) NOT VALID`)
	require.NoError(t, err)
	svc.Tokens = &vault.Vault{Pool: svc.Pool, Keys: keys}
	err = create(usecases.Caller{Actor: customer.Actor, CustomerID: "cust-2"}, "cust-2", "sim1", "tok_ok_5")
	require.ErrorContains(t, err, "count velocity creations")
	require.NotContains(t, err.Error(), "seal payment token")
	require.Equal(t, 3, count(`SELECT count(*) FROM subscriptions`))
}
