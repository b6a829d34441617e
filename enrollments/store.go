package enrollments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/rebilltype"
)

// EventSink receives every change of an enrollment or a bill, in the
// transaction that makes it, with the object as it is after the change.
// notify implements it; an error rolls the change back.
//
// BillStored receives a bill's change that publishes no event of its own
// (a pushed bill charged at once), so that the events the transaction
// wrote of the bill show it as the transaction leaves it.
type EventSink interface {
	EnrollmentChanged(ctx context.Context, tx pgx.Tx, eventType string, e Enrollment, at time.Time) error
	BillChanged(ctx context.Context, tx pgx.Tx, eventType string, b Bill, at time.Time) error
	BillStored(ctx context.Context, tx pgx.Tx, b Bill, at time.Time) error
}

// Store reads and writes enrollments and bills. Mutations take a pgx.Tx
// so that the row, its event and the jobs they cause commit together.
type Store struct {
	clock  clock.Clock
	events EventSink
}

// NewStore returns a store that stamps changes with clk's time.
func NewStore(clk clock.Clock) *Store { return &Store{clock: clk} }

// SetEventSink makes the store publish its changes to sink (wiring calls
// it before use).
func (st *Store) SetEventSink(sink EventSink) { st.events = sink }

func (st *Store) publish(ctx context.Context, tx pgx.Tx, typ string, e Enrollment, at time.Time) error {
	if st.events == nil {
		return nil
	}
	if err := st.events.EnrollmentChanged(ctx, tx, typ, e, at); err != nil {
		return fmt.Errorf("publish enrollment.%s: %w", typ, err)
	}
	return nil
}

const columns = `id, customer_id, kind, coalesce(els, ''), coalesce(sts, ''), coalesce(driver_license, ''), status, currency,
	max_amount, coalesce(pay_day, 0), pm_gateway, pm_token, coalesce(pm_brand, ''), coalesce(pm_last4, ''), pm_exp_month,
	pm_exp_year, coalesce(description, ''), metadata, created_at, updated_at, cancelled_at, receipt_customer`

func scan(row pgx.Row) (Enrollment, error) {
	var e Enrollment
	var meta []byte
	err := row.Scan(&e.ID, &e.CustomerID, &e.Kind, &e.AccountRef.ELS, &e.AccountRef.STS, &e.AccountRef.DriverLicense, &e.Status,
		&e.Currency, &e.MaxAmount, &e.PayDay, &e.PaymentMethod.Gateway, &e.PaymentMethod.Token, &e.PaymentMethod.Brand,
		&e.PaymentMethod.Last4, &e.PaymentMethod.ExpMonth, &e.PaymentMethod.ExpYear, &e.Description, &meta, &e.CreatedAt,
		&e.UpdatedAt, &e.CancelledAt, &e.ReceiptCustomer)
	if errors.Is(err, pgx.ErrNoRows) {
		return Enrollment{}, ErrNotFound
	}
	if err != nil {
		return Enrollment{}, fmt.Errorf("scan enrollment: %w", err)
	}
	if err := json.Unmarshal(meta, &e.Metadata); err != nil {
		return Enrollment{}, fmt.Errorf("decode enrollment metadata: %w", err)
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return e, nil
}

func collect(rows pgx.Rows, err error) ([]Enrollment, error) {
	if err != nil {
		return nil, fmt.Errorf("query enrollments: %w", err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Enrollment, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("query enrollments: %w", err)
	}
	return es, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Create inserts an active enrollment and publishes enrollment.created.
// Returns ErrCreatedBefore when n.ID is already an enrollment's.
func (st *Store) Create(ctx context.Context, tx pgx.Tx, n New) (Enrollment, error) {
	now := st.clock.Now()
	id := n.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return Enrollment{}, fmt.Errorf("new enrollment id: %w", err)
		}
	}
	meta := n.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return Enrollment{}, fmt.Errorf("encode metadata: %w", err)
	}
	var payDay *int
	if n.PayDay != 0 {
		payDay = &n.PayDay
	}
	pm := n.PaymentMethod
	e, err := scan(tx.QueryRow(ctx, `INSERT INTO enrollments (id, customer_id, kind, els, sts, driver_license, status, currency,
			max_amount, pay_day, pm_gateway, pm_token, pm_brand, pm_last4, pm_exp_month, pm_exp_year, description, metadata,
			created_at, updated_at, receipt_customer)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $19, $20)
		RETURNING `+columns, id, n.CustomerID, n.Kind, nullable(n.AccountRef.ELS), nullable(n.AccountRef.STS),
		nullable(n.AccountRef.DriverLicense), Active, n.Currency, n.MaxAmount, payDay, pm.Gateway, pm.Token, nullable(pm.Brand),
		nullable(pm.Last4), pm.ExpMonth, pm.ExpYear, nullable(n.Description), metaJSON, now, n.ReceiptCustomer))
	if pg.UniqueViolation(err, "enrollments_pkey") {
		return Enrollment{}, fmt.Errorf("%w: enrollment %s", ErrCreatedBefore, id)
	}
	if err != nil {
		return Enrollment{}, fmt.Errorf("insert enrollment: %w", err)
	}
	return e, st.publish(ctx, tx, EventCreated, e, now)
}

// Get returns one enrollment. Returns ErrNotFound.
func (st *Store) Get(ctx context.Context, db pg.DBTX, id uuid.UUID) (Enrollment, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM enrollments WHERE id = $1`, id))
}

// GetForUpdate returns one enrollment and locks its row until tx ends:
// every change of the enrollment, of its bills and every outcome of its
// charges takes this lock first. Returns ErrNotFound.
func (st *Store) GetForUpdate(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Enrollment, error) {
	return scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM enrollments WHERE id = $1 FOR UPDATE`, id))
}

// ListParams filters and pages a list; Before is the keyset cursor.
type ListParams struct {
	CustomerID string
	Before     uuid.UUID
	Limit      int
}

// List returns enrollments newest first: by creation time, then id, the
// keyset the cursor (the last id listed) continues. Not by id alone: an
// id derived from a request's Idempotency-Key is not in creation order.
func (st *Store) List(ctx context.Context, db pg.DBTX, p ListParams) ([]Enrollment, error) {
	var before *uuid.UUID
	if p.Before != uuid.Nil {
		before = &p.Before
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM enrollments
		WHERE ($1 = '' OR customer_id = $1)
		  AND ($2::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM enrollments WHERE id = $2))
		ORDER BY created_at DESC, id DESC LIMIT $3`,
		p.CustomerID, before, p.Limit))
}

// ByAccount returns the enrollments of kind that a bill source's account
// matches (any of the given identifiers), cancelled ones included. Every
// identifier is matched in its canonical spelling (AccountRef.Canonical):
// a fine a source filed under 77YA123456 reaches the enrollment of
// 77УА123456.
func (st *Store) ByAccount(ctx context.Context, db pg.DBTX, kind Kind, ref AccountRef) ([]Enrollment, error) {
	ref = ref.Canonical()
	return collect(db.Query(ctx, `SELECT `+columns+` FROM enrollments
		WHERE kind = $1 AND (els = $2 OR sts = $3 OR driver_license = $4) ORDER BY id`,
		kind, nullable(ref.ELS), nullable(ref.STS), nullable(ref.DriverLicense)))
}

// Enrolled returns up to limit enrollments of kind that take bills (not
// cancelled) with ids after after (uuid.Nil: from the first), by id: the
// accounts a bill source is asked about, page by page.
func (st *Store) Enrolled(ctx context.Context, db pg.DBTX, kind Kind, after uuid.UUID, limit int) ([]Enrollment, error) {
	return collect(db.Query(ctx, `SELECT `+columns+` FROM enrollments
		WHERE kind = $1 AND status <> $4 AND id > $2 ORDER BY id LIMIT $3`, kind, after, limit, string(Cancelled)))
}

// SetStatus moves an enrollment to status to (pause, resume, cancel).
// Reaching a status already reached changes nothing (changed false).
// Returns ErrNotFound or a *fsm.TransitionError.
func (st *Store) SetStatus(ctx context.Context, tx pgx.Tx, id uuid.UUID, to Status, event string) (Enrollment, bool, error) {
	now := st.clock.Now()
	e, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Enrollment{}, false, err
	}
	if e.Status == to {
		return e, false, nil
	}
	var cancelledAt *time.Time
	if to == Cancelled {
		cancelledAt = &now
	}
	moved, err := st.move(ctx, tx, e, to, event, now, `cancelled_at = $1`, cancelledAt)
	if err != nil {
		return e, false, err
	}
	return moved, true, nil
}

// move is the one guarded move of an enrollment the caller locked (as e):
// from its status to to, a move the machine allows (Machine.Move), with extra assignments
// (parameters from $1), stamped now, publishing event. Returns a *fsm.TransitionError,
// nothing written, for a move the table forbids or when the row left e's
// status.
func (st *Store) move(ctx context.Context, tx pgx.Tx, e Enrollment, to Status, event string, now time.Time, set string,
	args ...any) (Enrollment, error) {
	mv, err := Machine.Move(to, e.Status)
	if err != nil {
		return Enrollment{}, err
	}
	n := len(args)
	query := fmt.Sprintf(`UPDATE enrollments SET status = $%d, updated_at = $%d`, n+1, n+2)
	if set != "" {
		query += ", " + set
	}
	query += fmt.Sprintf(` WHERE id = $%d AND status = ANY($%d) RETURNING `, n+3, n+4) + columns
	moved, err := scan(tx.QueryRow(ctx, query, append(args, mv.To(), now, e.ID, fsm.Texts(mv.From()))...))
	if errors.Is(err, ErrNotFound) {
		return Enrollment{}, Machine.Refuse(e.Status, to, "the enrollment changed meanwhile")
	}
	if err != nil {
		return Enrollment{}, fmt.Errorf("move enrollment to %s: %w", to, err)
	}
	return moved, st.publish(ctx, tx, event, moved, now)
}

// ChangePaymentMethod replaces the card of an enrollment that is not
// cancelled; the same card changes nothing (changed false). Returns
// ErrNotFound or a *fsm.TransitionError for a cancelled one.
func (st *Store) ChangePaymentMethod(ctx context.Context, tx pgx.Tx, id uuid.UUID, pm rebilltype.PaymentMethod) (Enrollment, bool, error) {
	now := st.clock.Now()
	e, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Enrollment{}, false, err
	}
	if e.Status == Cancelled {
		return e, false, Machine.Refuse(Cancelled, Cancelled, "the enrollment is cancelled")
	}
	if e.PaymentMethod == pm {
		return e, false, nil
	}
	e, err = scan(tx.QueryRow(ctx, `UPDATE enrollments SET pm_gateway = $2, pm_token = $3, pm_brand = $4, pm_last4 = $5,
			pm_exp_month = $6, pm_exp_year = $7, updated_at = $8
		WHERE id = $1 RETURNING `+columns, id, pm.Gateway, pm.Token, nullable(pm.Brand), nullable(pm.Last4), pm.ExpMonth,
		pm.ExpYear, now))
	if err != nil {
		return Enrollment{}, false, fmt.Errorf("update payment method: %w", err)
	}
	return e, true, st.publish(ctx, tx, EventPaymentMethodUpdated, e, now)
}
