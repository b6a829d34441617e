package books

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/pg"
)

// Status of a gateway's day.
type Status string

const (
	// Pending: the day has not been checked yet (it is not over, or its
	// job has not run or could not reach the gateway).
	Pending Status = "pending"
	// Matched: every operation and every settled charge agreed.
	Matched Status = "matched"
	// Discrepancies: at least one disagreement was recorded.
	Discrepancies Status = "discrepancies"
)

// Result is a gateway's or a registry's day as GET /v1/reconciliation
// shows it: for a registry, Gateway is the registry gateway, Operations
// the payments judged and a discrepancy's GatewayReference the payment id.
type Result struct {
	Date          time.Time
	Gateway       string
	Status        Status
	CheckedAt     *time.Time
	Operations    int
	Discrepancies []Discrepancy
	// Unsupported: a registry without an export, read by a look-up per
	// payment id.
	Unsupported bool
}

// books are the tables of one kind of day: the gateways' or the
// registries'.
type books struct {
	days, discrepancies string
	name, count, ref    string // the columns of the name, the count and the reference
}

var (
	gatewayBooks  = books{days: "reconciliation_days", discrepancies: "reconciliation_discrepancies", name: "gateway", count: "operations", ref: "gateway_reference"}
	registryBooks = books{days: "registry_reconciliation_days", discrepancies: "registry_reconciliation_discrepancies", name: "registry", count: "payments", ref: "payment_id"}
)

// The ways a registry day's book was read (registry_reconciliation_days.export).
const (
	exportListed      = "listed"
	exportUnsupported = "unsupported"
)

// Get returns the result of gateway's day, Pending when it has not been
// checked.
func Get(ctx context.Context, db pg.DBTX, gw string, day time.Time) (Result, error) {
	return gatewayBooks.get(ctx, db, gw, day)
}

// GetRegistry returns the result of the registry gateway's day, Pending
// when it has not been checked.
func GetRegistry(ctx context.Context, db pg.DBTX, registry string, day time.Time) (Result, error) {
	return registryBooks.get(ctx, db, registry, day)
}

func (b books) get(ctx context.Context, db pg.DBTX, gw string, day time.Time) (Result, error) {
	day = Day(day)
	r := Result{Date: day, Gateway: gw, Status: Pending, Discrepancies: []Discrepancy{}}
	var at time.Time
	export := exportListed
	query := `SELECT status, operations, checked_at, 'listed' FROM reconciliation_days WHERE gateway = $1 AND day = $2`
	if b == registryBooks {
		query = `SELECT status, payments, checked_at, export FROM registry_reconciliation_days WHERE registry = $1 AND day = $2`
	}
	err := db.QueryRow(ctx, query, gw, day).Scan(&r.Status, &r.Operations, &at, &export)
	r.Unsupported = export == exportUnsupported
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("read reconciliation of %s on %s: %w", gw, day.Format(time.DateOnly), err)
	}
	at = at.UTC()
	r.CheckedAt = &at
	rows, err := db.Query(ctx, `SELECT kind, charge_id, coalesce(`+b.ref+`, ''), detail
		FROM `+b.discrepancies+` WHERE `+b.name+` = $1 AND day = $2 ORDER BY id`, gw, day)
	if err != nil {
		return Result{}, fmt.Errorf("read discrepancies of %s on %s: %w", gw, day.Format(time.DateOnly), err)
	}
	r.Discrepancies, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Discrepancy, error) {
		var d Discrepancy
		err := row.Scan(&d.Kind, &d.ChargeID, &d.GatewayReference, &d.Detail)
		return d, err
	})
	if err != nil {
		return Result{}, fmt.Errorf("read discrepancies of %s on %s: %w", gw, day.Format(time.DateOnly), err)
	}
	return r, nil
}

// save records a checked day once: a second check of the same day (a
// job run twice) keeps the first result and reports saved false.
func (b books) save(ctx context.Context, tx pgx.Tx, gw string, day time.Time, ops int, found []Discrepancy, unsupported bool,
	now time.Time) (saved bool, err error) {
	status := Matched
	if len(found) > 0 {
		status = Discrepancies
	}
	export := exportListed
	if unsupported {
		export = exportUnsupported
	}
	insert := `INSERT INTO reconciliation_days (gateway, day, status, operations, checked_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`
	args := []any{gw, day, status, ops, now}
	if b == registryBooks {
		insert = `INSERT INTO registry_reconciliation_days (registry, day, status, payments, checked_at, export)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
		args = append(args, export)
	}
	tag, err := tx.Exec(ctx, insert, args...)
	if err != nil {
		return false, fmt.Errorf("record reconciliation of %s on %s: %w", gw, day.Format(time.DateOnly), err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	for _, d := range found {
		var ref *string
		if d.GatewayReference != "" {
			ref = &d.GatewayReference
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+b.discrepancies+` (`+b.name+`, day, kind, charge_id, `+b.ref+`, detail)
			VALUES ($1, $2, $3, $4, $5, $6)`, gw, day, d.Kind, d.ChargeID, ref, d.Detail)
		if err != nil {
			return false, fmt.Errorf("record discrepancy of %s on %s: %w", gw, day.Format(time.DateOnly), err)
		}
	}
	return true, nil
}

// unchecked returns the finished days in [from, to) that gw has no result
// for, oldest first.
func (b books) unchecked(ctx context.Context, db pg.DBTX, gw string, from, to time.Time) ([]time.Time, error) {
	rows, err := db.Query(ctx, `SELECT d::date::timestamp AT TIME ZONE 'UTC' FROM generate_series($2::date, $3::date - 1, interval '1 day') AS d
		WHERE NOT EXISTS (SELECT 1 FROM `+b.days+` r WHERE r.`+b.name+` = $1 AND r.day = d::date) ORDER BY d`,
		gw, from.Format(time.DateOnly), to.Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("list unreconciled days of %s: %w", gw, err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("list unreconciled days of %s: %w", gw, err)
	}
	for i := range days {
		days[i] = days[i].UTC()
	}
	return days, nil
}

// openCount counts gw's discrepancies no person has reviewed.
func (b books) openCount(ctx context.Context, db pg.DBTX, gw string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM `+b.discrepancies+` WHERE `+b.name+` = $1 AND reviewed_at IS NULL`, gw).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count open discrepancies of %s: %w", gw, err)
	}
	return n, nil
}

// lastDay is the latest day checked for gw (zero when none).
func (b books) lastDay(ctx context.Context, db pg.DBTX, gw string) (time.Time, error) {
	var last *time.Time
	err := db.QueryRow(ctx, `SELECT max(day)::timestamp AT TIME ZONE 'UTC' FROM `+b.days+` WHERE `+b.name+` = $1`, gw).Scan(&last)
	if err != nil {
		return time.Time{}, fmt.Errorf("latest reconciled day of %s: %w", gw, err)
	}
	if last == nil {
		return time.Time{}, nil
	}
	return last.UTC(), nil
}
