package books

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/pg"
)

// Kind names what disagrees between a charge and its gateway.
type Kind string

const (
	// MissingAtGateway: rebill settled the charge as succeeded, but the
	// gateway has no succeeded capture under its key.
	MissingAtGateway Kind = "missing_at_gateway"
	// UnknownAtRebill: the gateway processed an operation whose key names
	// no charge of rebill's.
	UnknownAtRebill Kind = "unknown_at_rebill"
	// AmountMismatch: the operation's amount or currency differs from its
	// charge's (same attempt).
	AmountMismatch Kind = "amount_mismatch"
	// StatusMismatch: the gateway took money (capture) or released it
	// (void) while the charge says otherwise.
	StatusMismatch Kind = "status_mismatch"
	// DuplicateCapture: the charge has more than one succeeded capture at
	// the gateway.
	DuplicateCapture Kind = "duplicate_capture"
)

// Kinds lists every Kind: the closed set of
// rebill_reconciliation_discrepancies_total's kind label.
var Kinds = []Kind{MissingAtGateway, UnknownAtRebill, AmountMismatch, StatusMismatch, DuplicateCapture}

// Discrepancy is one disagreement found on a day.
type Discrepancy struct {
	Kind             Kind
	ChargeID         *uuid.UUID
	GatewayReference string
	Detail           string
}

// Lookup asks the gateway about one operation by its idempotency key
// (gateway.Gateway.Lookup); it returns gateway.ErrNotFound when the
// gateway never processed it.
type Lookup func(ctx context.Context, idempotencyKey string) (gateway.Result, error)

// Check compares one gateway's operations of one UTC day with rebill's
// charges, read from db (the replica when there is one). It returns the
// discrepancies in a stable order (kind, charge, reference) and how many operations
// the gateway listed. An error means the day could not be checked (the
// gateway did not answer): nothing is concluded from it.
func Check(ctx context.Context, db pg.DBTX, g gateway.Gateway, lookup Lookup, day time.Time) ([]Discrepancy, int, error) {
	day = Day(day)
	ops, err := g.Operations(ctx, day)
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	keys := make([]string, 0, len(ops))
	for _, op := range ops {
		if k, _, _, ok := charges.ParseGatewayKey(op.IdempotencyKey); ok {
			keys = append(keys, k)
		}
	}
	known, err := charges.ByKeys(ctx, db, keys)
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	settled, err := charges.SettledOn(ctx, db, g.Name(), day, day.Add(24*time.Hour))
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	m := matcher{byKey: map[string]charges.Charge{}, captures: map[uuid.UUID][]gateway.Result{}, lookup: lookup}
	for _, c := range known {
		m.byKey[c.Key()] = c
	}
	for _, op := range ops {
		m.operation(op)
	}
	if err := m.duplicates(ctx); err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	if err := m.missing(ctx, settled); err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	slices.SortStableFunc(m.found, func(a, b Discrepancy) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(chargeText(a.ChargeID), chargeText(b.ChargeID)),
			cmp.Compare(a.GatewayReference, b.GatewayReference))
	})
	return m.found, len(ops), nil
}

func chargeText(id *uuid.UUID) string {
	if id == nil {
		return ""
	}
	return id.String()
}

// Day is the UTC day that contains t, as its start.
func Day(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

type matcher struct {
	byKey    map[string]charges.Charge
	captures map[uuid.UUID][]gateway.Result // succeeded captures seen per charge
	lookup   Lookup
	found    []Discrepancy
}

func (m *matcher) add(kind Kind, c *charges.Charge, ref, format string, args ...any) {
	d := Discrepancy{Kind: kind, GatewayReference: ref, Detail: fmt.Sprintf(format, args...)}
	if c != nil {
		id := c.ID
		d.ChargeID = &id
	}
	m.found = append(m.found, d)
}

// inFlight are statuses in which a charge may hold a capture that rebill
// has not recorded yet (or a person is already looking at it).
var inFlight = []charges.Status{charges.Capturing, charges.Unknown, charges.RequiresReview}

func (m *matcher) operation(op gateway.Result) {
	key, attempt, kind, ok := charges.ParseGatewayKey(op.IdempotencyKey)
	c, known := m.byKey[key]
	if !ok || !known {
		m.add(UnknownAtRebill, nil, op.Reference, "%s %s of %d %s under key %q names no charge",
			op.Status, op.Op, op.Amount, op.Currency, op.IdempotencyKey)
		return
	}
	if kind != op.Op {
		m.add(UnknownAtRebill, &c, op.Reference, "a %s under the %s key %q", op.Op, kind, op.IdempotencyKey)
		return
	}
	if attempt == c.AttemptCount && (op.Amount != c.Amount || op.Currency != c.Currency) {
		m.add(AmountMismatch, &c, op.Reference, "%s of %d %s at the gateway, charge attempt %d is %d %s",
			op.Op, op.Amount, op.Currency, attempt, c.Amount, c.Currency)
	}
	if op.Status != gateway.StatusSucceeded {
		return
	}
	switch op.Op {
	case gateway.OpCapture:
		m.captures[c.ID] = append(m.captures[c.ID], op)
		if c.Status != charges.Succeeded && !slices.Contains(inFlight, c.Status) {
			m.add(StatusMismatch, &c, op.Reference, "the gateway captured %d %s (attempt %d) but the charge is %s",
				op.Amount, op.Currency, attempt, c.Status)
		}
	case gateway.OpVoid:
		if c.Status == charges.Succeeded && attempt == c.AttemptCount {
			m.add(StatusMismatch, &c, op.Reference, "the gateway voided the hold of attempt %d but the charge is succeeded", attempt)
		}
	}
}

// duplicates reports every succeeded capture of a charge beyond its first:
// those of the day, and those of its other attempts filed on other days.
func (m *matcher) duplicates(ctx context.Context) error {
	for _, c := range m.byKey {
		seen := m.captures[c.ID]
		if len(seen) == 0 {
			continue
		}
		refs := map[string]bool{}
		for _, op := range seen {
			refs[op.Reference] = true
		}
		for n := 1; n <= c.AttemptCount; n++ {
			k := fmt.Sprintf("%s:a%d:%s", c.Key(), n, gateway.OpCapture)
			if slices.ContainsFunc(seen, func(op gateway.Result) bool { return op.IdempotencyKey == k }) {
				continue
			}
			res, err := m.lookup(ctx, k)
			if errors.Is(err, gateway.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("look up %s: %w", k, err)
			}
			if res.Status == gateway.StatusSucceeded && !refs[res.Reference] {
				refs[res.Reference] = true
				seen = append(seen, res)
			}
		}
		for _, op := range seen[1:] {
			m.add(DuplicateCapture, &c, op.Reference, "capture %s (%d %s, key %q) is the charge's capture number %d",
				op.Reference, op.Amount, op.Currency, op.IdempotencyKey, len(refs))
		}
	}
	return nil
}

// missing reports charges settled as succeeded that day whose capture the
// gateway does not have.
func (m *matcher) missing(ctx context.Context, settled []charges.Charge) error {
	for _, c := range settled {
		if c.Status != charges.Succeeded || len(m.captures[c.ID]) > 0 {
			continue
		}
		key := c.GatewayKey(gateway.OpCapture)
		res, err := m.lookup(ctx, key)
		switch {
		case errors.Is(err, gateway.ErrNotFound):
			m.add(MissingAtGateway, &c, "", "the charge succeeded but the gateway has no capture under %q", key)
		case err != nil:
			return fmt.Errorf("look up %s: %w", key, err)
		case res.Status != gateway.StatusSucceeded:
			m.add(MissingAtGateway, &c, res.Reference, "the charge succeeded but its capture %q is %s at the gateway", key, res.Status)
		}
	}
	return nil
}
