package reports

import (
	"context"
	"time"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/pg"
)

// totalsOn sums the charges that settled in [from, to), by gateway and
// currency, through their owner (charges.SettledTotalsBetween).
func totalsOn(ctx context.Context, db pg.DBTX, from, to time.Time) ([]charges.SettledTotals, error) {
	return charges.SettledTotalsBetween(ctx, db, from, to)
}
