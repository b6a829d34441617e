package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pg"
)

// Posting is rebill's record of one attempt's posting to the registry, as
// reconciliation and the audit read it.
type Posting struct {
	PaymentID string
	ChargeID  uuid.UUID
	Attempt   int
	UIN       string
	Amount    int64
	Status    PostingStatus
	// Gateway is the registry gateway that answered it; "" while none
	// has said it took it.
	Gateway   string
	CreatedAt time.Time
	// UpdatedAt is its last move.
	UpdatedAt time.Time
}

const postingColumns = `payment_id, charge_id, attempt, uin, amount, status, coalesce(gateway, ''), created_at, updated_at`

func collectPostings(rows pgx.Rows, err error) ([]Posting, error) {
	if err != nil {
		return nil, fmt.Errorf("read postings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Posting, error) {
		var p Posting
		err := row.Scan(&p.PaymentID, &p.ChargeID, &p.Attempt, &p.UIN, &p.Amount, &p.Status, &p.Gateway, &p.CreatedAt, &p.UpdatedAt)
		p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read postings: %w", err)
	}
	return out, nil
}

// PostingsCreated returns the postings made in [from, to) of the service
// clock, oldest first.
func PostingsCreated(ctx context.Context, db pg.DBTX, from, to time.Time) ([]Posting, error) {
	return collectPostings(db.Query(ctx, `SELECT `+postingColumns+` FROM registry_postings
		WHERE created_at >= $1 AND created_at < $2 ORDER BY created_at, payment_id`, from, to))
}

// PostingsByIDs returns the postings of these payment ids; ids that are
// not rebill's are left out.
func PostingsByIDs(ctx context.Context, db pg.DBTX, paymentIDs []string) ([]Posting, error) {
	return collectPostings(db.Query(ctx, `SELECT `+postingColumns+` FROM registry_postings
		WHERE payment_id = ANY($1) ORDER BY payment_id`, paymentIDs))
}

// PostingsOfCharges returns the postings of these charges, by charge and
// attempt.
func PostingsOfCharges(ctx context.Context, db pg.DBTX, chargeIDs []uuid.UUID) ([]Posting, error) {
	return collectPostings(db.Query(ctx, `SELECT `+postingColumns+` FROM registry_postings
		WHERE charge_id = ANY($1) ORDER BY charge_id, attempt`, chargeIDs))
}
