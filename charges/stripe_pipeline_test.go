package charges_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/testkit/stripetest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// stripeBundle runs the charge pipeline on a started River client, with
// the Stripe adapter talking to the stripetest fake: a charge goes through
// authorize, capture and reconcile jobs as in production.
type stripeBundle struct {
	pool           *pgxpool.Pool
	client         *river.Client[pgx.Tx]
	clock          *testsupport.Clock
	fake           *stripetest.Server
	subs           *fakeSubscriptions
	subscriptionID uuid.UUID
}

func setupStripe(t *testing.T, token string) *stripeBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	clk := testsupport.NewClock(time.Now())
	fake := stripetest.NewServer(t)
	fake.Now = clk.Now
	// A connection per request: a lost answer on a reused connection is
	// sent again by Go's transport itself (see stripetest.LoseAnswer).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: fake.URL, APIKey: "sk_test_rebill", Timeout: 2 * time.Second,
		HTTPClient: &http.Client{Transport: transport}, Clock: clk})
	require.NoError(t, err)
	b := &stripeBundle{pool: pool, clock: clk, fake: fake, subscriptionID: uuid.New(),
		subs: &fakeSubscriptions{current: charges.OwnerState{Gateway: g.Name(), Token: token}}}
	retry := charges.RetryPolicy{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond, Now: time.Now}
	p := &charges.Pipeline{
		Pool:           pool,
		Store:          &charges.Store{Events: events},
		Gateways:       fleet.New([]gateway.Gateway{g}, fleet.DefaultBreaker),
		Owners:         charges.Owners{Subscriptions: b.subs},
		Clock:          clk,
		Dunning:        dunning,
		CallTimeout:    5 * time.Second,
		Retry:          retry,
		UnavailableFor: time.Minute,
		Logger:         zerolog.Nop(),
	}
	workers := river.NewWorkers()
	charges.Register(workers, p)
	b.client, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchPollInterval: 100 * time.Millisecond,
		MaxAttempts:       5,
		RetryPolicy:       retry,
		TestOnly:          true,
		Workers:           workers,
	})
	require.NoError(t, err)
	require.NoError(t, b.client.Start(ctx))
	t.Cleanup(func() { _ = b.client.Stop(context.Background()) })

	_, err = pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cus_1', 'active', 1999, 'EUR', 'month', 1, 'UTC', $2, $3, $4, $5, 12, 2030, $2, $2)`,
		b.subscriptionID, periodStart, periodStart.AddDate(0, 1, 0), g.Name(), token)
	require.NoError(t, err)
	return b
}

// charge creates the period's charge and enqueues its authorize, as the
// scan does, then waits for the pipeline to settle it in one of want.
func (b *stripeBundle) charge(t *testing.T, want ...charges.Status) charges.Charge {
	t.Helper()
	ctx := context.Background()
	var c charges.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		created, err := (&charges.Store{Queue: b.client}).Create(ctx, tx, []charges.New{{SubscriptionID: b.subscriptionID, CustomerID: "cus_1",
			PeriodKey: periodKey, PeriodStart: periodStart, Amount: 1999, Currency: "EUR", Gateway: b.subs.current.Gateway,
			Token: b.subs.current.Token}}, b.clock.Now())
		if err != nil {
			return err
		}
		c = created[0]
		return nil
	}))
	require.Eventually(t, func() bool {
		var err error
		c, err = charges.Get(ctx, b.pool, c.ID)
		require.NoError(t, err)
		for _, s := range want {
			if c.Status == s {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the charge did not settle")
	return c
}

// TestStripeChargedOnceThroughLostAnswers: both the hold's and the
// capture's answers are lost after Stripe acted. Reconciliation finds the
// hold by replaying its create and the capture by the PaymentIntent's id;
// the period is paid by exactly one captured PaymentIntent and nothing is
// sent twice.
func TestStripeChargedOnceThroughLostAnswers(t *testing.T) {
	t.Parallel()
	b := setupStripe(t, "cus_Q1w2e3/pm_card_visa")
	b.fake.Fail(stripetest.OpCreate, stripetest.LoseAnswer())
	b.fake.Fail(stripetest.OpCapture, stripetest.LoseAnswer())

	c := b.charge(t, charges.Succeeded, charges.RequiresReview, charges.Failed)

	require.Equal(t, charges.Succeeded, c.Status, c.ReviewReason)
	intents := b.fake.Intents()
	require.Len(t, intents, 1, "one PaymentIntent for the period")
	require.Equal(t, "succeeded", intents[0].Status)
	require.Equal(t, int64(1999), intents[0].AmountReceived)
	require.Equal(t, "eur", intents[0].Currency)
	require.Equal(t, intents[0].ID, c.AuthorizationRef)
	require.Equal(t, 2, b.fake.Calls(stripetest.OpCreate), "the send and the look-up's replay")
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCapture), "the capture found done was not sent again")
	require.Equal(t, []string{"paid(succeeded)"}, b.subs.calls())
}

// TestStripeAuthenticationRequiredNeedsTheCustomer: an off-session hold
// that the issuer wants authenticated fails the charge with that code (no
// dunning: only the customer can pass 3-D Secure), and nothing is held.
func TestStripeAuthenticationRequiredNeedsTheCustomer(t *testing.T) {
	t.Parallel()
	b := setupStripe(t, "cus_Q1w2e3/pm_auth_required")

	c := b.charge(t, charges.Failed, charges.Declined, charges.RequiresReview, charges.Succeeded)

	require.Equal(t, charges.Failed, c.Status)
	require.Equal(t, "authentication_required", c.FailureCode)
	require.Equal(t, []string{"failed(failed)"}, b.subs.calls())
	intents := b.fake.Intents()
	require.Len(t, intents, 1)
	require.Equal(t, "requires_payment_method", intents[0].Status, "no hold")
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCreate))
}

// TestStripeLostHoldPastTheKeyLifetimeGoesToReview: the hold's answer is
// lost and, by the time reconciliation asks, Stripe may have forgotten the
// key (24 h): replaying the create could place a second hold, so nothing
// is sent and the charge goes to review, its one hold left for a person.
func TestStripeLostHoldPastTheKeyLifetimeGoesToReview(t *testing.T) {
	t.Parallel()
	b := setupStripe(t, "cus_Q1w2e3/pm_card_visa")
	b.fake.Fail(stripetest.OpCreate, stripetest.Hang())
	go func() {
		// While Stripe holds the answer back, a day passes.
		for deadline := time.Now().Add(30 * time.Second); b.fake.Calls(stripetest.OpCreate) == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		b.clock.Advance(24 * time.Hour)
	}()

	c := b.charge(t, charges.RequiresReview, charges.Succeeded, charges.Failed)

	require.Equal(t, charges.RequiresReview, c.Status)
	require.Contains(t, c.ReviewReason, "can no longer tell")
	require.Equal(t, 1, b.fake.Calls(stripetest.OpCreate), "no replay past the key's lifetime")
	intents := b.fake.Intents()
	require.Len(t, intents, 1)
	require.Equal(t, "requires_capture", intents[0].Status, "neither captured nor replaced")
	require.Empty(t, b.subs.calls())
}
