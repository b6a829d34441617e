package subscriptions

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
)

// OverduePeriod is a billing period that began and has no charge yet.
type OverduePeriod struct {
	SubscriptionID uuid.UUID
	Start          time.Time
}

// Overdue returns the subscriptions that bill (active, past due; not set to
// cancel at that period's start) whose next period began in [from, before)
// and was not charged: the billing scan creates the charge and moves
// next_charge_at on in one transaction, so a period left behind is one that
// would be charged zero times. A trial still on after its end is one too:
// the scan ends a trial and charges its first period in one transaction.
// The self-audit reports them.
func Overdue(ctx context.Context, db pg.DBTX, from, before time.Time) ([]OverduePeriod, error) {
	rows, err := db.Query(ctx, `SELECT id, next_charge_at FROM subscriptions
		WHERE NOT cancel_at_period_end AND (
			(`+billingSQL+` AND next_charge_at >= $1 AND next_charge_at < $2)
			OR (status = `+fsm.Quoted(Trialing)+` AND trial_end >= $1 AND trial_end < $2))
		ORDER BY next_charge_at, id`, from, before)
	if err != nil {
		return nil, fmt.Errorf("overdue periods: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OverduePeriod, error) {
		var p OverduePeriod
		err := row.Scan(&p.SubscriptionID, &p.Start)
		p.Start = p.Start.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("overdue periods: %w", err)
	}
	return out, nil
}
