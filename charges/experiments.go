package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/platform/pg"
)

// ExperimentFigures counts, by arm, the charges of the subscriptions subs
// whose record names the experiment key, as experiments.Records asks:
// the charges' subscription index finds them, and the record (a charge's
// is its subscription's when it was created) picks the experiment's.
func ExperimentFigures(ctx context.Context, db pg.DBTX, key string, subs []uuid.UUID) ([]experiments.ChargeFigures, error) {
	rows, err := db.Query(ctx, `SELECT experiments->>$1, count(*),
			count(*) FILTER (WHERE status = $2 AND attempt_count = 1),
			count(*) FILTER (WHERE attempt_count > 1 OR status IN ($2, $3, $4)),
			count(*) FILTER (WHERE status = $2 AND attempt_count > 1),
			count(*) FILTER (WHERE (status = $2 AND attempt_count > 1) OR status = $3),
			count(*) FILTER (WHERE status = $5 OR resolution IS NOT NULL),
			count(*) FILTER (WHERE status = $6),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - period_start)) FILTER (WHERE status = $2)
		FROM charges WHERE subscription_id = ANY($7) AND experiments ? $1 GROUP BY 1`,
		key, string(Succeeded), string(Failed), string(Declined), string(RequiresReview), string(Unknown), subs)
	if err != nil {
		return nil, fmt.Errorf("charges of experiment %s: %w", key, err)
	}
	defer rows.Close()
	var out []experiments.ChargeFigures
	for rows.Next() {
		var f experiments.ChargeFigures
		var median *float64
		if err := rows.Scan(&f.Arm, &f.Count, &f.FirstApproved, &f.FirstTrials, &f.Recovered, &f.RecoveryTrials,
			&f.Review, &f.Unknown, &median); err != nil {
			return nil, fmt.Errorf("charges of experiment %s: %w", key, err)
		}
		if median != nil {
			d := time.Duration(*median * float64(time.Second))
			f.MedianToPay = &d
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("charges of experiment %s: %w", key, err)
	}
	return out, nil
}

// ExperimentPaid groups the succeeded charges of the subscriptions subs
// whose record names the experiment key by arm, gateway, currency and
// amount: what the arms collected, and what their gateways kept of it.
func ExperimentPaid(ctx context.Context, db pg.DBTX, key string, subs []uuid.UUID) ([]experiments.PaidCharges, error) {
	rows, err := db.Query(ctx, `SELECT experiments->>$1, gateway, currency, amount, count(*)
		FROM charges WHERE subscription_id = ANY($3) AND experiments ? $1 AND status = $2
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 3`, key, string(Succeeded), subs)
	if err != nil {
		return nil, fmt.Errorf("paid charges of experiment %s: %w", key, err)
	}
	defer rows.Close()
	var out []experiments.PaidCharges
	for rows.Next() {
		var p experiments.PaidCharges
		if err := rows.Scan(&p.Arm, &p.Gateway, &p.Currency, &p.Amount, &p.Count); err != nil {
			return nil, fmt.Errorf("paid charges of experiment %s: %w", key, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("paid charges of experiment %s: %w", key, err)
	}
	return out, nil
}
