package reports

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/internal/pg"
)

// dayTotals are one gateway's and currency's charges that reached a
// status on one day.
type dayTotals struct {
	Gateway        string
	Currency       string
	CapturedCount  int64
	CapturedAmount int64
	DeclinedCount  int64 // soft declines waiting for dunning
	FailedCount    int64 // hard declines, refused requests, dunning exhausted
	VoidedCount    int64
}

// totalsOn sums the charges whose status last changed in [from, to) to
// succeeded, declined, failed or voided (their settled_at), by gateway and
// currency. A charge counts once, under the status it holds now: a soft
// decline recovered by dunning counts as captured on the day of the
// capture, and a declined charge whose card changes while it waits stays
// on the day of its decline.
func totalsOn(ctx context.Context, db pg.DBTX, from, to time.Time) ([]dayTotals, error) {
	rows, err := db.Query(ctx, `SELECT gateway, currency,
			count(*) FILTER (WHERE status = $3),
			coalesce(sum(amount) FILTER (WHERE status = $3), 0)::bigint,
			count(*) FILTER (WHERE status = $4),
			count(*) FILTER (WHERE status = $5),
			count(*) FILTER (WHERE status = $6)
		FROM `+charges.SettledBetweenSQL+`
		WHERE status = ANY(ARRAY[$3, $4, $5, $6])
		GROUP BY 1, 2 ORDER BY 1, 2`, from, to, string(charges.Succeeded), string(charges.Declined), string(charges.Failed), string(charges.Voided))
	if err != nil {
		return nil, fmt.Errorf("charge totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dayTotals, error) {
		var t dayTotals
		err := row.Scan(&t.Gateway, &t.Currency, &t.CapturedCount, &t.CapturedAmount, &t.DeclinedCount, &t.FailedCount, &t.VoidedCount)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("charge totals: %w", err)
	}
	return out, nil
}
