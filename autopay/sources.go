package autopay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/enrollments"
)

// SourcedBill is a bill a source published for an account.
type SourcedBill struct {
	Account enrollments.AccountRef
	Bill    enrollments.BillInput
	// PaidOutside is how much of the bill the source reports paid by
	// payments rebill did not make (0: none known).
	PaidOutside int64
}

// BillSource is where one kind's bills are published (GIS ZhKKh for
// housing, GIS GMP for fines). Pull returns every bill the source holds
// for rebill's payers; rebill stores each once however often it is
// pulled, so a source need not remember what it handed out.
type BillSource interface {
	Pull(ctx context.Context) ([]SourcedBill, error)
}

// DevSource is dev mode's simulated bill source of one kind: bills
// published with POST /v1/dev/bill-sources/{kind}/bills, kept in the
// dev_bill_source table so that every node pulls the same ones.
type DevSource struct {
	Pool *pgxpool.Pool
	Kind enrollments.Kind
}

// devBill is a published bill as stored.
type devBill struct {
	BillID           string     `json:"bill_id"`
	Amount           int64      `json:"amount"`
	IssuedAt         time.Time  `json:"issued_at"`
	DueDate          string     `json:"due_date"`
	DiscountDeadline *string    `json:"discount_deadline,omitempty"`
	DiscountedAmount *int64     `json:"discounted_amount,omitempty"`
	ELS              string     `json:"els,omitempty"`
	STS              string     `json:"sts,omitempty"`
	DriverLicense    string     `json:"driver_license,omitempty"`
	Received         *time.Time `json:"-"`
}

// accountKey is the account a published bill is filed under.
func accountKey(ref enrollments.AccountRef) string {
	switch {
	case ref.ELS != "":
		return ref.ELS
	case ref.STS != "":
		return "sts:" + ref.STS
	}
	return "dl:" + ref.DriverLicense
}

// Publish files a bill in the simulated source, in tx. Publishing a bill
// id again for the same account keeps the first (returns false).
func (s DevSource) Publish(ctx context.Context, tx pgx.Tx, b SourcedBill, now time.Time) (bool, error) {
	row := devBill{BillID: b.Bill.BillID, Amount: b.Bill.Amount, IssuedAt: b.Bill.IssuedAt, DueDate: b.Bill.DueDate.String(),
		DiscountedAmount: b.Bill.DiscountedAmount, ELS: b.Account.ELS, STS: b.Account.STS, DriverLicense: b.Account.DriverLicense}
	if b.Bill.DiscountDeadline != nil {
		d := b.Bill.DiscountDeadline.String()
		row.DiscountDeadline = &d
	}
	data, err := json.Marshal(row)
	if err != nil {
		return false, fmt.Errorf("encode published bill: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO dev_bill_source (kind, account_key, bill_id, bill, received_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, s.Kind, accountKey(b.Account), b.Bill.BillID, data, now)
	if err != nil {
		return false, fmt.Errorf("publish bill: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Pull returns every bill published to the simulated source.
func (s DevSource) Pull(ctx context.Context) ([]SourcedBill, error) {
	rows, err := s.Pool.Query(ctx, `SELECT bill FROM dev_bill_source WHERE kind = $1 ORDER BY received_at, bill_id`, s.Kind)
	if err != nil {
		return nil, fmt.Errorf("pull %s bills: %w", s.Kind, err)
	}
	raws, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("pull %s bills: %w", s.Kind, err)
	}
	out := make([]SourcedBill, 0, len(raws))
	for _, raw := range raws {
		var row devBill
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, fmt.Errorf("decode published bill: %w", err)
		}
		due, err := enrollments.ParseDate(row.DueDate)
		if err != nil {
			return nil, fmt.Errorf("published bill %s: %w", row.BillID, err)
		}
		b := SourcedBill{Account: enrollments.AccountRef{ELS: row.ELS, STS: row.STS, DriverLicense: row.DriverLicense},
			Bill: enrollments.BillInput{BillID: row.BillID, Amount: row.Amount, IssuedAt: row.IssuedAt, DueDate: due,
				DiscountedAmount: row.DiscountedAmount}}
		if row.DiscountDeadline != nil {
			d, err := enrollments.ParseDate(*row.DiscountDeadline)
			if err != nil {
				return nil, fmt.Errorf("published bill %s: %w", row.BillID, err)
			}
			b.Bill.DiscountDeadline = &d
		}
		out = append(out, b)
	}
	return out, nil
}
