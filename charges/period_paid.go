package charges

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/fsm"
)

// PeriodPaid is what a subscription period's charges hold: the period's
// own charge and its adjustment charges (period key
// "<period key>:adj:<change id>").
type PeriodPaid struct {
	// Captured is what they captured and kept: the succeeded ones'
	// amounts less what was refunded of them.
	Captured int64
	// InFlight tells that one of them is being charged (or waits for a
	// person): what it will capture is not known yet.
	InFlight bool
}

// AdjustmentKey is the period key of the adjustment charge a change of
// the subscription's price makes for the period periodKey: the charge's
// key is then <subscription>:<period key>:adj:<change id>, one per change.
func AdjustmentKey(periodKey string, changeID uuid.UUID) string {
	return periodKey + adjustmentInfix + changeID.String()
}

const adjustmentInfix = ":adj:"

// PaidForPeriod reads what the charges of the subscription's period
// periodKey hold (see PeriodPaid): a price change prorates against what
// was actually captured, never against money not paid.
func PaidForPeriod(ctx context.Context, db DBTX, subscriptionID uuid.UUID, periodKey string) (PeriodPaid, error) {
	var p PeriodPaid
	err := db.QueryRow(ctx, `SELECT
			coalesce(sum(amount - amount_refunded) FILTER (WHERE status = `+fsm.Quoted(Succeeded)+`), 0),
			coalesce(bool_or(in_flight OR status = `+fsm.Quoted(RequiresReview)+`), false)
		FROM charges WHERE subscription_id = $1 AND (period_key = $2 OR starts_with(period_key, $2 || $3))`,
		subscriptionID, periodKey, adjustmentInfix).Scan(&p.Captured, &p.InFlight)
	if err != nil {
		return PeriodPaid{}, fmt.Errorf("read what period %s of subscription %s paid: %w", periodKey, subscriptionID, err)
	}
	return p, nil
}

// Charged tells, for each of the subscriptions' periods (ids[i], keys[i]),
// whether it has a charge of its own, in any status: a period is charged
// once, so one that has is not charged again.
func Charged(ctx context.Context, db DBTX, ids []uuid.UUID, keys []string) ([]bool, error) {
	out := make([]bool, len(ids))
	rows, err := db.Query(ctx, `SELECT k.i FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS k(sub, key, i)
		WHERE EXISTS (SELECT 1 FROM charges c WHERE c.subscription_id = k.sub AND c.period_key = k.key)`, ids, keys)
	if err != nil {
		return nil, fmt.Errorf("read which periods are charged: %w", err)
	}
	var i int64
	if _, err := pgx.ForEachRow(rows, []any{&i}, func() error {
		out[i-1] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read which periods are charged: %w", err)
	}
	return out, nil
}
