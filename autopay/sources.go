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

// PullRequest asks a bill source for the bills of some accounts published
// after a sequence.
type PullRequest struct {
	// Accounts name one identifier each: an ELS (housing), an STS or a
	// driving licence (fines). At most Limit; none asks only for the
	// source's head (Page.Next), which also tells that it answers.
	Accounts []enrollments.AccountRef
	// After: only bills whose sequence is above it (0: from the first).
	After int64
	// Limit bounds Page.Bills and Page.Invalid together.
	Limit int
}

// Page is a source's answer to a PullRequest.
type Page struct {
	// Bills of the accounts with a sequence above After, by sequence.
	Bills []SourcedBill
	// Invalid are bills the source published that cannot be read (a bad
	// date, an unknown account form): logged and skipped, never stored.
	Invalid []InvalidBill
	// HasMore: bills above Next remain; ask again with After = Next, which
	// is then above After.
	HasMore bool
	// Next is the sequence the answer covers: with HasMore, the last bill
	// returned; without, the source's head when it answered (at least
	// After): every bill of the accounts up to it was returned.
	Next int64
}

// InvalidBill is a published bill a source could not turn into a
// SourcedBill, and why.
type InvalidBill struct {
	BillID   string
	Sequence int64
	Err      error
}

// SourceInfo is what the pull needs to know of a source.
type SourceInfo struct {
	// Name keys the source's cursor, metrics and logs; it identifies the
	// source's sequence, so a different system needs a different name.
	Name string
	// BatchSize is PullRequest.Limit: accounts per request, bills per page
	// (a pull asks for at least minBatch).
	BatchSize int
	// RereadWindow: each pull asks from the cursor that was current this
	// long ago, so that bills made visible late are read too.
	RereadWindow time.Duration
}

// BillSource is where one kind's bills are published (GIS ZhKH for
// housing, GIS GMP for fines). Each published bill has a sequence number
// that grows with publication; rebill keeps a cursor over it per source
// (see Autopay.Pull) and stores each bill once however often it is read,
// so a source may answer the same bill many times.
type BillSource interface {
	Info() SourceInfo
	// Pull answers one page of req. An error means nothing was read: the
	// pull stops and its cursor stays.
	Pull(ctx context.Context, req PullRequest) (Page, error)
}

// Defaults of the simulated sources, the production ones' defaults.
const (
	devBatchSize    = 200
	devRereadWindow = 7 * 24 * time.Hour
)

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
	// A housing bill's GIS ZhKH identifiers and supplier.
	PaymentDocumentID string `json:"payment_document_id,omitempty"`
	ServiceID         string `json:"service_id,omitempty"`
	Period            string `json:"period,omitempty"`
	SupplierINN       string `json:"supplier_inn,omitempty"`
	SupplierKPP       string `json:"supplier_kpp,omitempty"`
	SupplierName      string `json:"supplier_name,omitempty"`
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
		DiscountedAmount: b.Bill.DiscountedAmount, ELS: b.Account.ELS, STS: b.Account.STS, DriverLicense: b.Account.DriverLicense,
		PaymentDocumentID: b.Bill.PaymentDocumentID, ServiceID: b.Bill.ServiceID, Period: b.Bill.Period,
		SupplierINN: b.Bill.Supplier.INN, SupplierKPP: b.Bill.Supplier.KPP, SupplierName: b.Bill.Supplier.Name}
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

// Info names the simulated source dev-<kind>.
func (s DevSource) Info() SourceInfo {
	return SourceInfo{Name: "dev-" + string(s.Kind), BatchSize: devBatchSize, RereadWindow: devRereadWindow}
}

// Pull answers a page of the simulated source: the page and the head are
// read in one snapshot, so that Next covers exactly what was visible.
func (s DevSource) Pull(ctx context.Context, req PullRequest) (Page, error) {
	keys := make([]string, len(req.Accounts))
	for i, ref := range req.Accounts {
		keys[i] = accountKey(ref)
	}
	limit := max(req.Limit, 1)
	var page Page
	var raws [][]byte
	var seqs []int64
	var head int64
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT seq, bill FROM dev_bill_source
			WHERE kind = $1 AND seq > $2 AND account_key = ANY($3) ORDER BY seq LIMIT $4`, s.Kind, req.After, keys, limit+1)
		if err != nil {
			return err
		}
		for rows.Next() {
			var seq int64
			var raw []byte
			if err := rows.Scan(&seq, &raw); err != nil {
				rows.Close()
				return err
			}
			seqs, raws = append(seqs, seq), append(raws, raw)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM dev_bill_source WHERE kind = $1`, s.Kind).Scan(&head)
	})
	if err != nil {
		return Page{}, fmt.Errorf("pull %s bills: %w", s.Kind, err)
	}
	page.Next = max(req.After, head)
	if len(raws) > limit {
		raws, seqs = raws[:limit], seqs[:limit]
		page.HasMore, page.Next = true, seqs[limit-1]
	}
	for i, raw := range raws {
		b, id, err := decodeDevBill(raw)
		if err != nil {
			page.Invalid = append(page.Invalid, InvalidBill{BillID: id, Sequence: seqs[i], Err: err})
			continue
		}
		page.Bills = append(page.Bills, b)
	}
	return page, nil
}

// decodeDevBill reads a stored bill; the bill id is returned even when
// the rest is bad.
func decodeDevBill(raw []byte) (SourcedBill, string, error) {
	var row devBill
	if err := json.Unmarshal(raw, &row); err != nil {
		return SourcedBill{}, "", fmt.Errorf("decode published bill: %w", err)
	}
	due, err := enrollments.ParseDate(row.DueDate)
	if err != nil {
		return SourcedBill{}, row.BillID, fmt.Errorf("due_date: %w", err)
	}
	b := SourcedBill{Account: enrollments.AccountRef{ELS: row.ELS, STS: row.STS, DriverLicense: row.DriverLicense},
		Bill: enrollments.BillInput{BillID: row.BillID, Amount: row.Amount, IssuedAt: row.IssuedAt, DueDate: due,
			DiscountedAmount: row.DiscountedAmount, PaymentDocumentID: row.PaymentDocumentID, ServiceID: row.ServiceID,
			Period: row.Period, Supplier: enrollments.Supplier{INN: row.SupplierINN, KPP: row.SupplierKPP, Name: row.SupplierName}}}
	if row.DiscountDeadline != nil {
		d, err := enrollments.ParseDate(*row.DiscountDeadline)
		if err != nil {
			return SourcedBill{}, row.BillID, fmt.Errorf("discount_deadline: %w", err)
		}
		b.Bill.DiscountDeadline = &d
	}
	return b, row.BillID, nil
}
