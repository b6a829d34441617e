// Package opstest writes charges and simulated-gateway ledger entries
// straight into a test database, so that reconciliation, the self-audit
// and the reports can be tested on exactly the books a case needs
// (a duplicate capture, a capture nobody asked for) without driving the
// pipeline into producing them.
package opstest

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/subscriptions"
)

// Gateway starts the simulated gateway name on pool (its ledger in the
// gatewaysim schema of the test's database) and returns its client.
func Gateway(t testing.TB, pool *pgxpool.Pool, name string) *sim.Client {
	t.Helper()
	ctx := context.Background()
	baseURL, stop, err := sim.Start(ctx, pool, []string{name}, zerolog.New(io.Discard))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	return sim.NewClient(name, baseURL+"/"+name, sim.ClientOptions{Timeout: 5 * time.Second})
}

// Subscription inserts an active monthly subscription on gateway gw and
// returns its id.
func Subscription(t testing.TB, pool *pgxpool.Pool, gw string, at time.Time) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := pool.Exec(context.Background(), `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
			interval_count, timezone, billing_anchor, next_charge_at, pm_gateway, pm_token, pm_exp_month, pm_exp_year,
			created_at, updated_at)
		VALUES ($1, 'cust-ops', $5, 1000, 'RUB', 'month', 1, 'UTC', $2, $3, $4, 'tok_ok', 12, 2030, $2, $2)`,
		id, at, at.AddDate(0, 1, 0), gw, subscriptions.Active)
	require.NoError(t, err)
	return id
}

// Enrollment inserts an active housing enrollment paying with a card on
// gateway gw and returns its id. Every one is of the same account, each of
// its own customer (one customer's second would be a repeat the audit
// lists).
func Enrollment(t testing.TB, pool *pgxpool.Pool, gw string, at time.Time) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := pool.Exec(context.Background(), `INSERT INTO enrollments (id, customer_id, kind, els, status, currency, max_amount,
			pm_gateway, pm_token, pm_exp_month, pm_exp_year, created_at, updated_at)
		VALUES ($1, $6, $4, '75AB533315', $5, 'RUB', 1000000, $2, 'tok_ok', 12, 2030, $3, $3)`,
		id, gw, at, enrollments.Housing, enrollments.Active, "cust-ops-"+id.String()[:8])
	require.NoError(t, err)
	return id
}

// Charge is a charge row to insert: a subscription period's, or, with
// Enrollment set, the charge of the bill BillID.
type Charge struct {
	Subscription uuid.UUID
	Enrollment   uuid.UUID
	BillID       string
	PeriodStart  time.Time
	Amount       int64  // default 1000
	Currency     string // default RUB
	Gateway      string
	Status       string
	Attempt      int       // default 1
	UpdatedAt    time.Time // default PeriodStart
	Resolution   string    // "succeeded" or "failed" for a person's resolution
}

// InsertCharge inserts c and returns its id and business key.
func InsertCharge(t testing.TB, pool *pgxpool.Pool, c Charge) (uuid.UUID, string) {
	t.Helper()
	if c.Amount == 0 {
		c.Amount = 1000
	}
	if c.Currency == "" {
		c.Currency = "RUB"
	}
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = c.PeriodStart
	}
	id := uuid.New()
	owner, periodKey := c.Subscription, c.PeriodStart.UTC().Format(time.DateOnly)
	var sub, enrollment *uuid.UUID
	if c.Enrollment != uuid.Nil {
		owner, periodKey, enrollment = c.Enrollment, c.BillID, &c.Enrollment
	} else {
		sub = &c.Subscription
	}
	var next *time.Time
	if c.Status == "declined" {
		at := c.UpdatedAt.Add(24 * time.Hour)
		next = &at
	}
	var resolution *string
	if c.Resolution != "" {
		resolution = &c.Resolution
	}
	_, err := pool.Exec(context.Background(), `INSERT INTO charges (id, subscription_id, enrollment_id, customer_id, period_key,
			period_start, amount, currency, gateway, pm_token, status, attempt_count, next_attempt_at, resolution, created_at,
			updated_at, attempt_due_at, attempt_times)
		VALUES ($1, $2, $13, 'cust-ops', $3, $4, $5, $6, $7, 'tok_ok', $8, $9, $10, $11, $4, $12, $4, ARRAY[$4::timestamptz])`,
		id, sub, periodKey, c.PeriodStart, c.Amount, c.Currency, c.Gateway, c.Status, c.Attempt, next,
		resolution, c.UpdatedAt, enrollment)
	require.NoError(t, err)
	return id, owner.String() + ":" + periodKey
}

// Op is a ledger entry of a simulated gateway.
type Op struct {
	Gateway   string
	ChargeKey string
	Attempt   int    // default 1
	Op        string // authorize, capture, void
	Amount    int64  // default 1000
	Currency  string // default RUB
	Status    string // default succeeded
	At        time.Time
	// Key overrides the idempotency key built from ChargeKey and Attempt.
	Key string
}

// InsertOp writes o into the gateway's ledger as if the gateway had
// processed it, and returns its reference.
func InsertOp(t testing.TB, pool *pgxpool.Pool, o Op) string {
	t.Helper()
	if o.Attempt == 0 {
		o.Attempt = 1
	}
	if o.Amount == 0 {
		o.Amount = 1000
	}
	if o.Currency == "" {
		o.Currency = "RUB"
	}
	if o.Status == "" {
		o.Status = "succeeded"
	}
	if o.Key == "" {
		o.Key = fmt.Sprintf("%s:a%d:%s", o.ChargeKey, o.Attempt, o.Op)
	}
	ref := o.Gateway + "_op_" + uuid.NewString()
	_, err := pool.Exec(context.Background(), `INSERT INTO gatewaysim.operations (gateway, op, idempotency_key, reference,
			token_last4, token_kind, charge_key, amount, currency, status, at)
		VALUES ($1, $2, $3, $4, 'k_ok', 'ok', $5, $6, $7, $8, $9)`,
		o.Gateway, o.Op, o.Key, ref, o.ChargeKey, o.Amount, o.Currency, o.Status, o.At)
	require.NoError(t, err)
	return ref
}

// Paid inserts a succeeded charge of one period and its authorize and
// capture in the ledger at its UpdatedAt, and returns the charge's id and
// key.
func Paid(t testing.TB, pool *pgxpool.Pool, c Charge) (uuid.UUID, string) {
	t.Helper()
	c.Status = "succeeded"
	id, key := InsertCharge(t, pool, c)
	at := c.UpdatedAt
	if at.IsZero() {
		at = c.PeriodStart
	}
	attempt := max(c.Attempt, 1)
	InsertOp(t, pool, Op{Gateway: c.Gateway, ChargeKey: key, Attempt: attempt, Op: "authorize", Amount: c.Amount, Currency: c.Currency, At: at})
	InsertOp(t, pool, Op{Gateway: c.Gateway, ChargeKey: key, Attempt: attempt, Op: "capture", Amount: c.Amount, Currency: c.Currency, At: at})
	return id, key
}

// Refund is a refund of rebill's books, written without driving the
// refund jobs.
type Refund struct {
	ChargeID  uuid.UUID
	ChargeKey string
	N         int    // default 1
	Amount    int64  // default 1000
	Currency  string // default RUB
	Gateway   string
	Status    string // default succeeded
	At        time.Time
}

// InsertRefund writes r into refunds, raises its charge's sums as the
// refund machine would (so the charge's CHECK holds), and returns the
// refund's gateway key.
func InsertRefund(t testing.TB, pool *pgxpool.Pool, r Refund) string {
	t.Helper()
	if r.N == 0 {
		r.N = 1
	}
	if r.Amount == 0 {
		r.Amount = 1000
	}
	if r.Currency == "" {
		r.Currency = "RUB"
	}
	if r.Status == "" {
		r.Status = "succeeded"
	}
	key := fmt.Sprintf("%s:r%d:refund", r.ChargeKey, r.N) // charges.RefundKey, which this kit may not import
	var settled *time.Time
	if r.Status == "succeeded" || r.Status == "failed" {
		settled = &r.At
	}
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO refunds (id, charge_id, n, gateway_key, amount, currency, reason, status, gateway,
			actor, created_at, updated_at, sent_at, settled_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'requested_by_customer', $7, $8, 'ops-test', $9, $9, $9, $10)`,
		uuid.New(), r.ChargeID, r.N, key, r.Amount, r.Currency, r.Status, r.Gateway, r.At, settled)
	require.NoError(t, err)
	var reserved, refunded int64
	if r.Status != "failed" {
		reserved = r.Amount
	}
	if r.Status == "succeeded" {
		refunded = r.Amount
	}
	_, err = pool.Exec(ctx, `UPDATE charges SET refund_reserved = refund_reserved + $2, amount_refunded = amount_refunded + $3,
			refund_count = greatest(refund_count, $4) WHERE id = $1`, r.ChargeID, reserved, refunded, r.N)
	require.NoError(t, err)
	return key
}
