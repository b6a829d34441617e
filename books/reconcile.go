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
	// RefundMissingAtGateway: rebill holds a refund as succeeded, but the
	// gateway has no succeeded refund under its key: the customer may not
	// have had the money back.
	RefundMissingAtGateway Kind = "refund_missing_at_gateway"
	// RefundUnknownAtRebill: the gateway returned money under a key that
	// names no refund of rebill's.
	RefundUnknownAtRebill Kind = "refund_unknown_at_rebill"
	// RefundAmountMismatch: the gateway's refund returned another amount or
	// currency than rebill's refund under the same key.
	RefundAmountMismatch Kind = "refund_amount_mismatch"
	// RefundStatusMismatch: the gateway returned the money of a refund that
	// rebill holds as failed.
	RefundStatusMismatch Kind = "refund_status_mismatch"
)

// Kinds lists every Kind: the closed set of
// rebill_reconciliation_discrepancies_total's kind label.
var Kinds = []Kind{MissingAtGateway, UnknownAtRebill, AmountMismatch, StatusMismatch, DuplicateCapture,
	RefundMissingAtGateway, RefundUnknownAtRebill, RefundAmountMismatch, RefundStatusMismatch}

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
	var refundKeys []string
	for _, op := range ops {
		if k, _, _, ok := charges.ParseGatewayKey(op.IdempotencyKey); ok {
			keys = append(keys, k)
		}
		if _, _, ok := charges.ParseRefundKey(op.IdempotencyKey); ok {
			refundKeys = append(refundKeys, op.IdempotencyKey)
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
	knownRefunds, err := charges.RefundsByKeys(ctx, db, refundKeys)
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	settledRefunds, err := charges.RefundsSettled(ctx, db, g.Name(), day, day.Add(24*time.Hour))
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	m := matcher{byKey: map[string]charges.Charge{}, captures: map[uuid.UUID][]gateway.Result{}, lookup: lookup,
		refunds: map[string]charges.Refund{}, refunded: map[string]bool{}}
	for _, c := range known {
		m.byKey[c.Key()] = c
	}
	for _, r := range knownRefunds {
		m.refunds[r.GatewayKey] = r
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
	if err := m.missingRefunds(ctx, settledRefunds); err != nil {
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
	// refunds are rebill's refunds named by the day's operations, by
	// gateway key; refunded the keys the gateway shows a succeeded refund
	// under that day.
	refunds  map[string]charges.Refund
	refunded map[string]bool
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
	if _, _, isRefund := charges.ParseRefundKey(op.IdempotencyKey); isRefund || op.Op == gateway.OpRefund {
		m.refund(op)
		return
	}
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

func (m *matcher) addRefund(kind Kind, r *charges.Refund, ref, format string, args ...any) {
	d := Discrepancy{Kind: kind, GatewayReference: ref, Detail: fmt.Sprintf(format, args...)}
	if r != nil {
		id := r.ChargeID
		d.ChargeID = &id
	}
	m.found = append(m.found, d)
}

// refund matches one refund operation of the gateway with rebill's refund
// under its key. A refund rebill has not settled yet (pending, unknown)
// may already be done at the gateway: its look-up settles it, so only a
// failed one disagrees.
func (m *matcher) refund(op gateway.Result) {
	r, known := m.refunds[op.IdempotencyKey]
	if !known {
		m.addRefund(RefundUnknownAtRebill, nil, op.Reference, "%s %s of %d %s under key %q names no refund",
			op.Status, op.Op, op.Amount, op.Currency, op.IdempotencyKey)
		return
	}
	if op.Op != gateway.OpRefund {
		m.addRefund(RefundUnknownAtRebill, &r, op.Reference, "a %s under the refund key %q", op.Op, op.IdempotencyKey)
		return
	}
	if op.Status != gateway.StatusSucceeded {
		return
	}
	m.refunded[op.IdempotencyKey] = true
	if op.Amount != r.Amount || op.Currency != r.Currency {
		m.addRefund(RefundAmountMismatch, &r, op.Reference, "the gateway refunded %d %s under %q, rebill's refund is %d %s",
			op.Amount, op.Currency, op.IdempotencyKey, r.Amount, r.Currency)
	}
	if r.Status == charges.RefundFailed {
		m.addRefund(RefundStatusMismatch, &r, op.Reference, "the gateway refunded %d %s under %q but rebill's refund failed (%s)",
			op.Amount, op.Currency, op.IdempotencyKey, r.FailureCode)
	}
}

// missingRefunds reports refunds rebill settled as succeeded that day
// whose money the gateway did not return: looked up by key when the day's
// operations do not show it (the gateway may have filed it under another
// day).
func (m *matcher) missingRefunds(ctx context.Context, settled []charges.Refund) error {
	for _, r := range settled {
		if r.Status != charges.RefundSucceeded || m.refunded[r.GatewayKey] {
			continue
		}
		res, err := m.lookup(ctx, r.GatewayKey)
		switch {
		case errors.Is(err, gateway.ErrNotFound):
			m.addRefund(RefundMissingAtGateway, &r, "", "the refund of %d %s succeeded but the gateway has no refund under %q",
				r.Amount, r.Currency, r.GatewayKey)
		case err != nil:
			return fmt.Errorf("look up %s: %w", r.GatewayKey, err)
		case res.Status != gateway.StatusSucceeded:
			m.addRefund(RefundMissingAtGateway, &r, res.Reference, "the refund succeeded but %q is %s at the gateway",
				r.GatewayKey, res.Status)
		case res.Amount != r.Amount || res.Currency != r.Currency:
			m.addRefund(RefundAmountMismatch, &r, res.Reference, "the gateway refunded %d %s under %q, rebill's refund is %d %s",
				res.Amount, res.Currency, r.GatewayKey, r.Amount, r.Currency)
		}
	}
	return nil
}
