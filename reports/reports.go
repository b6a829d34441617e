// Package reports builds the daily financial report per gateway and
// currency from PostgreSQL (the replica when one is configured): charges
// captured (count and sum), soft declines, failures and voids of the UTC
// day, the gateway's commission on the captured sum, and the refunds that
// succeeded that day (count and sum), beside the captures: a refund is
// counted on the day it succeeded, whichever day its charge was captured.
//
// Bills paid per kind join the report as another source once autopay
// enrollments exist: a source is one more query summed into the rows.
package reports

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/platform/pg"
)

// Rates gives a gateway's commission on a currency in basis points (1/100
// of a percent), from the gateway configuration (commission_bps).
type Rates func(gateway, currency string) int64

// NoCommission is the rate of a gateway whose commission is not configured.
func NoCommission(string, string) int64 { return 0 }

// Row is one gateway's and currency's day.
type Row struct {
	Gateway        string `json:"gateway"`
	Currency       string `json:"currency"`
	CapturedCount  int64  `json:"captured_count"`
	CapturedAmount int64  `json:"captured_amount"`
	DeclinedCount  int64  `json:"declined_count"`
	FailedCount    int64  `json:"failed_count"`
	VoidedCount    int64  `json:"voided_count"`
	CommissionBPS  int64  `json:"commission_bps"`
	// Commission is the captured amount times the rate, rounded up once
	// per row, in minor units.
	Commission int64 `json:"commission"`
	// RefundedCount and RefundedAmount are the refunds that succeeded that
	// day and their sum, in minor units.
	RefundedCount  int64 `json:"refunded_count"`
	RefundedAmount int64 `json:"refunded_amount"`
}

// Daily is the report of one UTC day.
type Daily struct {
	Date time.Time
	Rows []Row
}

// Build computes the report of the UTC day that contains day.
func Build(ctx context.Context, db pg.DBTX, day time.Time, rates Rates) (Daily, error) {
	from := day.UTC().Truncate(24 * time.Hour)
	totals, err := totalsOn(ctx, db, from, from.Add(24*time.Hour))
	if err != nil {
		return Daily{}, fmt.Errorf("daily report of %s: %w", from.Format(time.DateOnly), err)
	}
	if rates == nil {
		rates = NoCommission
	}
	refunds, err := charges.RefundsSettled(ctx, db, "", from, from.Add(24*time.Hour))
	if err != nil {
		return Daily{}, fmt.Errorf("daily report of %s: %w", from.Format(time.DateOnly), err)
	}
	d := Daily{Date: from, Rows: make([]Row, 0, len(totals))}
	at := map[[2]string]int{} // gateway and currency -> index in d.Rows
	for _, t := range totals {
		bps := rates(t.Gateway, t.Currency)
		at[[2]string{t.Gateway, t.Currency}] = len(d.Rows)
		d.Rows = append(d.Rows, Row{Gateway: t.Gateway, Currency: t.Currency, CapturedCount: t.CapturedCount,
			CapturedAmount: t.CapturedAmount, DeclinedCount: t.DeclinedCount, FailedCount: t.FailedCount,
			VoidedCount: t.VoidedCount, CommissionBPS: bps, Commission: commission(t.CapturedAmount, bps)})
	}
	for _, r := range refunds {
		k := [2]string{r.Gateway, r.Currency}
		i, ok := at[k]
		if !ok { // a day with refunds and no charge settled at that gateway in that currency
			i = len(d.Rows)
			at[k] = i
			d.Rows = append(d.Rows, Row{Gateway: r.Gateway, Currency: r.Currency, CommissionBPS: rates(r.Gateway, r.Currency)})
		}
		d.Rows[i].RefundedCount++
		d.Rows[i].RefundedAmount += r.Amount
	}
	slices.SortStableFunc(d.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Gateway, b.Gateway), cmp.Compare(a.Currency, b.Currency))
	})
	return d, nil
}

// commission is amount times bps/10000, rounded up.
func commission(amount, bps int64) int64 {
	if amount <= 0 || bps <= 0 {
		return 0
	}
	return (amount*bps + 9999) / 10000
}

// csvHeader names the CSV columns, the JSON fields of Row after the date.
var csvHeader = []string{"date", "gateway", "currency", "captured_count", "captured_amount", "declined_count",
	"failed_count", "voided_count", "commission_bps", "commission", "refunded_count", "refunded_amount"}

// WriteCSV writes the report as CSV (RFC 4180), a header then one line per
// row.
func (d Daily) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	date := d.Date.Format(time.DateOnly)
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range d.Rows {
		if err := cw.Write([]string{date, r.Gateway, r.Currency, n(r.CapturedCount), n(r.CapturedAmount), n(r.DeclinedCount),
			n(r.FailedCount), n(r.VoidedCount), n(r.CommissionBPS), n(r.Commission), n(r.RefundedCount),
			n(r.RefundedAmount)}); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
