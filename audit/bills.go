package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/audit/billcheck"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/pg"
)

// Bills judges autopay bills by the rules of package billcheck, the same
// code the chaos soak judges them with. The bills judged are those
// received in the range and every other copy of the same issuer bill id
// (another enrollment of the same account or car), whenever it came: a
// bill is paid once across the service.
type Bills struct {
	// Now is the service clock.
	Now time.Time
	// AnnulWithin bounds how long an accepted posting of money not
	// captured may stand (billcheck.Data.AnnulWithin).
	AnnulWithin time.Duration
	// OpsOnServiceClock: every gateway stamps its operations on the
	// service clock (dev mode with only the simulated gateways); see
	// billcheck.Data.OpsOnServiceClock.
	OpsOnServiceClock bool
	// Registries are the registry gateways whose book says what the state
	// holds of each posting (its RegistryStatus): their export of the
	// days the postings were made, and a look-up by payment id of the
	// postings the exports do not list. None: the postings are judged by
	// rebill's own records alone.
	Registries []registry.Gateway
}

// BillData reads what billcheck judges for the bills received in [from,
// to) and their copies: rows from db, and each bill charge's captures
// looked up at its gateway attempt by attempt.
func BillData(ctx context.Context, db pg.DBTX, gateways []gateway.Gateway, from, to time.Time, rules Bills) (*billcheck.Data, error) {
	d := &billcheck.Data{Now: rules.Now, AnnulWithin: rules.AnnulWithin, OpsOnServiceClock: rules.OpsOnServiceClock}
	rows, err := db.Query(ctx, `SELECT b.id, b.enrollment_id, b.bill_id, b.amount, b.discounted_amount, b.discount_deadline,
			b.expires_at, b.status, b.confirmed_at, b.charge_id
		FROM bills b WHERE b.bill_id IN (SELECT bill_id FROM bills WHERE received_at >= $1 AND received_at < $2)
		ORDER BY b.bill_id, b.id`, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit bills: %w", err)
	}
	var enrollmentIDs []uuid.UUID
	var keys []string
	// lastMoment is each charge key's last moment to start an attempt.
	lastMoment := map[string]time.Time{}
	for rows.Next() {
		var b billcheck.Bill
		var id, enrollment uuid.UUID
		var charge *uuid.UUID
		var deadline *time.Time
		if err := rows.Scan(&id, &enrollment, &b.BillID, &b.Amount, &b.DiscountedAmount, &deadline, &b.ExpiresAt, &b.Status,
			&b.ConfirmedAt, &charge); err != nil {
			rows.Close()
			return nil, fmt.Errorf("audit bills: %w", err)
		}
		b.ID, b.EnrollmentID = id.String(), enrollment.String()
		if charge != nil {
			b.ChargeID = charge.String()
		}
		if deadline != nil {
			end := enrollments.NewDate(*deadline).End()
			b.DiscountEnds = &end
		}
		d.Bills = append(d.Bills, b)
		enrollmentIDs = append(enrollmentIDs, enrollment)
		keys = append(keys, charges.Key(enrollment, b.BillID))
		lastMoment[charges.Key(enrollment, b.BillID)] = b.ExpiresAt.Add(-billcheck.LastAttemptMargin)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit bills: %w", err)
	}
	if len(d.Bills) == 0 {
		return d, nil
	}
	if err := readEnrollments(ctx, db, enrollmentIDs, d); err != nil {
		return nil, err
	}
	cs, err := charges.ByKeys(ctx, db, keys)
	if err != nil {
		return nil, fmt.Errorf("audit bills: %w", err)
	}
	byName := map[string]gateway.Gateway{}
	for _, g := range gateways {
		byName[g.Name()] = g
	}
	chargeIDs := make([]uuid.UUID, 0, len(cs))
	for _, c := range cs {
		if c.EnrollmentID == uuid.Nil {
			continue
		}
		chargeIDs = append(chargeIDs, c.ID)
		d.Charges = append(d.Charges, billcheck.Charge{ID: c.ID.String(), EnrollmentID: c.EnrollmentID.String(), BillID: c.PeriodKey,
			Status: string(c.Status), AttemptCount: c.AttemptCount, AttemptTimes: c.AttemptTimes, UpdatedAt: c.UpdatedAt,
			PaidOutside: c.PaidOutside, HoldReleased: c.HoldReleasedAt != nil})
		g := byName[c.Gateway]
		if g == nil {
			continue
		}
		for n := 1; n <= c.AttemptCount; n++ {
			key := fmt.Sprintf("%s:a%d:%s", c.Key(), n, gateway.OpCapture)
			res, err := g.Lookup(ctx, gateway.ByKey(gateway.OpCapture, key))
			if errors.Is(err, gateway.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("audit: look up %s: %w", key, err)
			}
			d.Ops = append(d.Ops, billcheck.Op{Gateway: g.Name(), Op: string(gateway.OpCapture), IdempotencyKey: key,
				Status: string(res.Status), Amount: res.Amount, At: res.At})
			if n <= len(c.AttemptTimes) || !rules.OpsOnServiceClock {
				continue
			}
			// The attempt's start is not recorded: its authorization's
			// stamp bounds it.
			if err := lookUpAuthorize(ctx, g, c.Key(), n, d); err != nil {
				return nil, err
			}
		}
		// An attempt recorded at or after its bill's last moment breaks
		// the rule only if it was sent.
		for n := 1; n <= len(c.AttemptTimes); n++ {
			if last, ok := lastMoment[c.Key()]; ok && !c.AttemptTimes[n-1].Before(last) {
				if err := lookUpAuthorize(ctx, g, c.Key(), n, d); err != nil {
					return nil, err
				}
			}
		}
	}
	ps, err := readPostings(ctx, db, chargeIDs, d)
	if err != nil {
		return nil, err
	}
	return d, readRegistry(ctx, rules.Registries, ps, d)
}

// lookUpAuthorize adds the authorization of attempt n of chargeKey, if g
// has it, to d.Ops.
func lookUpAuthorize(ctx context.Context, g gateway.Gateway, chargeKey string, n int, d *billcheck.Data) error {
	key := fmt.Sprintf("%s:a%d:%s", chargeKey, n, gateway.OpAuthorize)
	res, err := g.Lookup(ctx, gateway.ByKey(gateway.OpAuthorize, key))
	if errors.Is(err, gateway.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: look up %s: %w", key, err)
	}
	d.Ops = append(d.Ops, billcheck.Op{Gateway: g.Name(), Op: string(gateway.OpAuthorize), IdempotencyKey: key,
		Status: string(res.Status), Amount: res.Amount, At: res.At})
	return nil
}

func readEnrollments(ctx context.Context, db pg.DBTX, ids []uuid.UUID, d *billcheck.Data) error {
	rows, err := db.Query(ctx, `SELECT id, customer_id, kind, coalesce(els, ''), max_amount FROM enrollments WHERE id = ANY($1)
		ORDER BY id`, ids)
	if err != nil {
		return fmt.Errorf("audit enrollments: %w", err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (billcheck.Enrollment, error) {
		var e billcheck.Enrollment
		var id uuid.UUID
		err := row.Scan(&id, &e.CustomerID, &e.Kind, &e.ELS, &e.MaxAmount)
		e.ID = id.String()
		return e, err
	})
	if err != nil {
		return fmt.Errorf("audit enrollments: %w", err)
	}
	d.Enrollments = es
	return nil
}

// readPostings adds the charges' postings, read through charges, to d
// and returns them, in the same order.
func readPostings(ctx context.Context, db pg.DBTX, chargeIDs []uuid.UUID, d *billcheck.Data) ([]charges.Posting, error) {
	ps, err := charges.PostingsOfCharges(ctx, db, chargeIDs)
	if err != nil {
		return nil, fmt.Errorf("audit postings: %w", err)
	}
	d.Postings = make([]billcheck.Posting, len(ps))
	for i, p := range ps {
		d.Postings[i] = billcheck.Posting{PaymentID: p.PaymentID, ChargeID: p.ChargeID.String(), Attempt: p.Attempt, UIN: p.UIN,
			Amount: p.Amount, Status: string(p.Status)}
	}
	return ps, nil
}

// readRegistry sets each posting's RegistryStatus from the registry
// gateways' book: what their exports list for the UTC days the postings
// were made and the day after each (a payment may be taken after
// midnight), then, for a posting no export lists (or every posting, from
// a gateway without an export), a look-up by payment id at the gateway
// that answered it, or at each gateway when none did: the first that
// holds it says its status; none holds it: not_found. A registry that
// cannot be read fails the audit rather than judge without it.
func readRegistry(ctx context.Context, registries []registry.Gateway, ps []charges.Posting, d *billcheck.Data) error {
	if len(registries) == 0 || len(ps) == 0 {
		return nil
	}
	ours := make(map[string]bool, len(ps))
	days := map[time.Time]bool{}
	for _, p := range ps {
		ours[p.PaymentID] = true
		day := p.CreatedAt.UTC().Truncate(24 * time.Hour)
		days[day], days[day.AddDate(0, 0, 1)] = true, true
	}
	statuses := map[string]registry.RegistryStatus{}
	for _, g := range registries {
		for day := range days {
			listed, err := registry.Export(ctx, g, day)
			if errors.Is(err, registry.ErrExportUnsupported) {
				break
			}
			if err != nil {
				return fmt.Errorf("audit: the registry's book: %w", err)
			}
			for _, e := range listed {
				if ours[e.PaymentID] {
					statuses[e.PaymentID] = e.Status
				}
			}
		}
	}
	byName := make(map[string]registry.Gateway, len(registries))
	for _, g := range registries {
		byName[g.Name()] = g
	}
	for i := range d.Postings {
		p := &d.Postings[i]
		status, ok := statuses[p.PaymentID]
		if !ok {
			asked := registries
			if g, named := byName[ps[i].Gateway]; named {
				asked = []registry.Gateway{g}
			}
			status = registry.RegistryNotFound
			for _, g := range asked {
				got, err := registry.LookupStatus(ctx, g, p.PaymentID)
				if err != nil {
					return fmt.Errorf("audit: the registry's book: look up %s: %w", p.PaymentID, err)
				}
				if got != registry.RegistryNotFound {
					status = got
					break
				}
			}
		}
		p.RegistryStatus = string(status)
	}
	return nil
}
