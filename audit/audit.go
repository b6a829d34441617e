// Package audit is rebill's self-audit (`rebill audit`, docs/AUDIT.md):
// over a range of days it checks that every
// owed item has at most one capture at the gateways, and one unless it
// failed for good or waits in review, and that every capture the gateways
// hold belongs to exactly one item. Refunds are judged per charge on the
// gateways' books: what they returned stays within what they captured,
// each refund key is there once, and every refund rebill holds succeeded
// is there with its amount.
//
// # Sources
//
// What is owed comes from a [Source]. [Periods] yields the subscription
// periods that began in the range (each period's charge, and the periods
// the billing scan left without one); it includes bill charges, whose
// period start is when the bill was first charged. Autopay bills are also
// judged by their own money rules (package billcheck, shared with the
// chaos soak) when Auditor.Bills is set: their discrepancies carry the
// rule's name as their kind.
package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/audit/billcheck"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/subscriptions"
)

// Kinds of discrepancy.
const (
	// DuplicateCapture: an item has more than one succeeded capture.
	DuplicateCapture = "duplicate_capture"
	// MissingAtGateway: the charge succeeded but no gateway has its capture.
	MissingAtGateway = "missing_at_gateway"
	// UnknownAtRebill: a capture whose key names no charge.
	UnknownAtRebill = "unknown_at_rebill"
	// StatusMismatch: a capture exists but the charge failed or was voided.
	StatusMismatch = "status_mismatch"
	// AmountMismatch: the capture's amount or currency is not the charge's.
	AmountMismatch = "amount_mismatch"
	// NotCharged: an owed item has no charge although it is due.
	NotCharged = "not_charged"
	// RepeatedEnrollment: a customer has more than one enrollment, not
	// cancelled, of one account (see enrollments.ListRepeated).
	RepeatedEnrollment = "enrollment-repeated"
	// RefundOverCapture: the gateways returned more of a charge's money
	// than they captured.
	RefundOverCapture = "refund_over_capture"
	// DuplicateRefund: one refund key has more than one succeeded refund
	// at the gateway: the money went back twice.
	DuplicateRefund = "duplicate_refund"
	// RefundMissingAtGateway: rebill holds a refund succeeded but no
	// gateway has returned its money under its key.
	RefundMissingAtGateway = "refund_missing_at_gateway"
	// RefundUnknownAtRebill: a refund at the gateway under a key that names
	// no refund of rebill's succeeded, pending or unknown refunds.
	RefundUnknownAtRebill = "refund_unknown_at_rebill"
	// RefundAmountMismatch: the gateway's refund is not rebill's amount or
	// currency under the same key.
	RefundAmountMismatch = "refund_amount_mismatch"
)

// Discrepancy is one broken rule.
type Discrepancy struct {
	Kind             string     `json:"kind"`
	ChargeID         *uuid.UUID `json:"charge_id"`
	ChargeKey        string     `json:"charge_key"`
	Gateway          string     `json:"gateway"`
	GatewayReference string     `json:"gateway_reference"`
	Detail           string     `json:"detail"`
}

func (d Discrepancy) String() string {
	var b strings.Builder
	b.WriteString(d.Kind)
	if d.ChargeID != nil {
		b.WriteString(" charge=" + d.ChargeID.String())
	}
	if d.ChargeKey != "" {
		b.WriteString(" key=" + d.ChargeKey)
	}
	if d.Gateway != "" {
		b.WriteString(" gateway=" + d.Gateway)
	}
	if d.GatewayReference != "" {
		b.WriteString(" ref=" + d.GatewayReference)
	}
	return b.String() + ": " + d.Detail
}

// Report is an audit's outcome; its JSON is `rebill audit --json`.
type Report struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Periods  int    `json:"periods"`
	Captured int    `json:"captured"`
	Failed   int    `json:"failed"`
	InReview int    `json:"in_review"`
	NotOwed  int    `json:"not_owed"`
	// Open items are still being charged (in flight, or dunning).
	Open int `json:"open"`
	// GatewayCaptures counts the succeeded captures the gateways listed
	// for the days searched.
	GatewayCaptures int `json:"gateway_captures"`
	// Refunds counts the succeeded refunds rebill holds of the range's
	// charges; GatewayRefunds the succeeded refunds the gateways listed for
	// the days searched.
	Refunds        int `json:"refunds"`
	GatewayRefunds int `json:"gateway_refunds"`
	// Bills counts the autopay bills judged by their own rules.
	Bills         int           `json:"bills"`
	Discrepancies []Discrepancy `json:"discrepancies"`
}

// Item is one owed thing: its charge, or, when the scan left it without
// one, nil and what it is.
type Item struct {
	Charge *charges.Charge
	Key    string // the charge key it has or would have
	Detail string // for an item without a charge
}

// Source yields the owed items whose due time is in [from, to).
type Source interface {
	Items(ctx context.Context, from, to time.Time) ([]Item, error)
}

// Periods is the Source of subscription periods, read from db.
type Periods struct {
	DB pg.DBTX
	// Now is the service clock; a period due more than Grace before it
	// and still without a charge is reported.
	Now   time.Time
	Grace time.Duration
}

// Items returns the charges of the periods that began in [from, to) and the
// periods due in it that have none.
func (p Periods) Items(ctx context.Context, from, to time.Time) ([]Item, error) {
	cs, err := charges.ByPeriodStart(ctx, p.DB, from, to)
	if err != nil {
		return nil, err
	}
	items := make([]Item, 0, len(cs))
	for i := range cs {
		items = append(items, Item{Charge: &cs[i], Key: cs[i].Key()})
	}
	before := p.Now.Add(-p.Grace)
	if to.Before(before) {
		before = to
	}
	overdue, err := subscriptions.Overdue(ctx, p.DB, from, before)
	if err != nil {
		return nil, err
	}
	for _, o := range overdue {
		items = append(items, Item{Key: o.SubscriptionID.String(),
			Detail: fmt.Sprintf("the period that began at %s has no charge", o.Start.Format(time.RFC3339))})
	}
	return items, nil
}

// Auditor checks items against the gateways' books.
type Auditor struct {
	DB       pg.DBTX
	Gateways []gateway.Gateway
	Sources  []Source
	// SettleDays are searched past the range for captures of its items
	// (dunning retries for days after a period begins).
	SettleDays int
	// Bills, when set, has the bills received in the range judged by the
	// rules of package billcheck.
	Bills *Bills
}

type capture struct {
	gateway string
	op      gateway.Result
}

// listed are the gateways' succeeded operations of the days searched, by
// charge key ("" for keys rebill did not make).
type listed struct {
	captures, refunds map[string][]capture
}

// Run audits the items due in [from, to): days, UTC.
func (a *Auditor) Run(ctx context.Context, from, to time.Time) (Report, error) {
	r := Report{From: from.Format(time.DateOnly), To: to.AddDate(0, 0, -1).Format(time.DateOnly), Discrepancies: []Discrepancy{}}
	var items []Item
	for _, s := range a.Sources {
		got, err := s.Items(ctx, from, to)
		if err != nil {
			return Report{}, fmt.Errorf("audit: %w", err)
		}
		items = append(items, got...)
	}
	ops, err := a.captures(ctx, from, to, &r)
	if err != nil {
		return Report{}, err
	}
	captures := ops.captures
	owned := map[string]bool{}
	for _, it := range items {
		r.Periods++
		owned[it.Key] = true
		if it.Charge == nil {
			r.Discrepancies = append(r.Discrepancies, Discrepancy{Kind: NotCharged, ChargeKey: it.Key, Detail: it.Detail})
			continue
		}
		found, err := a.judge(ctx, *it.Charge, captures[it.Key], &r)
		if err != nil {
			return Report{}, err
		}
		if err := a.judgeRefunds(ctx, *it.Charge, found, ops.refunds[it.Key], &r); err != nil {
			return Report{}, err
		}
	}
	if err := a.strays(ctx, captures, owned, from, to, UnknownAtRebill, "capture", &r); err != nil {
		return Report{}, err
	}
	if err := a.strays(ctx, ops.refunds, owned, from, to, RefundUnknownAtRebill, "refund", &r); err != nil {
		return Report{}, err
	}
	if a.Bills != nil {
		d, err := BillData(ctx, a.DB, a.Gateways, from, to, *a.Bills)
		if err != nil {
			return Report{}, err
		}
		r.Bills = len(d.Bills)
		flagged := map[string]bool{}
		for _, v := range billcheck.Check(d) {
			r.Discrepancies = append(r.Discrepancies, Discrepancy{Kind: v.Invariant, ChargeKey: v.Charge,
				Detail: fmt.Sprintf("bill %q: %s", v.Bill, v.Detail)})
			if v.Invariant == billcheck.OneCapturePerIdentity {
				flagged[v.Bill] = true
			}
		}
		if err := a.paidTwice(ctx, flagged, &r); err != nil {
			return Report{}, err
		}
		if err := a.repeated(ctx, &r); err != nil {
			return Report{}, err
		}
	}
	return r, nil
}

// maxPaidTwice bounds the identities paid twice one report lists.
const maxPaidTwice = 1000

// paidTwice reports the bill identities captured more than once whenever
// they were received: pairs paid before one payment per identity was
// enforced stay outside its unique index, and an overpayment is owed back
// however old it is. Identities of bills the range's checks flagged
// (flagged, by bill id) are not listed twice.
func (a *Auditor) paidTwice(ctx context.Context, flagged map[string]bool, r *Report) error {
	pairs, err := charges.ListPaidTwice(ctx, a.DB, maxPaidTwice)
	if err != nil {
		return err
	}
	for _, p := range pairs {
		_, billID, _ := strings.Cut(p.Identity, ":") // uin:<UIN> or els:<ELS>:<bill id>
		if _, housing, ok := strings.Cut(billID, ":"); ok {
			billID = housing
		}
		if flagged[billID] {
			continue
		}
		ids := make([]string, len(p.ChargeIDs))
		for i, id := range p.ChargeIDs {
			ids[i] = id.String()
		}
		later := p.ChargeIDs[len(p.ChargeIDs)-1]
		r.Discrepancies = append(r.Discrepancies, Discrepancy{Kind: billcheck.OneCapturePerIdentity, ChargeID: &later,
			Detail: fmt.Sprintf("bill identity %s captured by %d charges (%s): refund all but the first",
				p.Identity, len(ids), strings.Join(ids, ", "))})
	}
	return nil
}

// maxRepeated bounds the repeated enrollments one report lists.
const maxRepeated = 1000

// repeated reports, whatever the range, each customer's enrollments of
// one account that are not cancelled: decision 23 refuses a repeat, but
// enrollments made before it, or under two spellings of one STS or
// licence that the migration to one spelling made equal, stay until
// support cancels all but one (a bill reaching several is paid once).
func (a *Auditor) repeated(ctx context.Context, r *Report) error {
	groups, err := enrollments.ListRepeated(ctx, a.DB, maxRepeated)
	if err != nil {
		return err
	}
	for _, g := range groups {
		ids := make([]string, len(g.EnrollmentIDs))
		for i, id := range g.EnrollmentIDs {
			ids[i] = id.String()
		}
		r.Discrepancies = append(r.Discrepancies, Discrepancy{Kind: RepeatedEnrollment,
			Detail: fmt.Sprintf("customer %q has %d enrollments of one %s, not cancelled (%s): cancel all but one",
				g.CustomerID, len(ids), g.Field, strings.Join(ids, ", "))})
	}
	return nil
}

// captures lists the gateways' succeeded captures and refunds from the
// range's first day to SettleDays past its end, by charge key.
func (a *Auditor) captures(ctx context.Context, from, to time.Time, r *Report) (listed, error) {
	out := listed{captures: map[string][]capture{}, refunds: map[string][]capture{}}
	for _, g := range a.Gateways {
		for d := from; d.Before(to.AddDate(0, 0, a.SettleDays)); d = d.AddDate(0, 0, 1) {
			ops, err := g.Operations(ctx, d)
			if err != nil {
				return listed{}, fmt.Errorf("audit: %w", err)
			}
			for _, op := range ops {
				if op.Status != gateway.StatusSucceeded {
					continue
				}
				switch op.Op {
				case gateway.OpCapture:
					r.GatewayCaptures++
					key, _, _, _ := charges.ParseGatewayKey(op.IdempotencyKey)
					out.captures[key] = append(out.captures[key], capture{gateway: g.Name(), op: op})
				case gateway.OpRefund:
					r.GatewayRefunds++
					key, _, _ := charges.ParseRefundKey(op.IdempotencyKey)
					out.refunds[key] = append(out.refunds[key], capture{gateway: g.Name(), op: op})
				}
			}
		}
	}
	return out, nil
}

func (a *Auditor) gateway(name string) gateway.Gateway {
	for _, g := range a.Gateways {
		if g.Name() == name {
			return g
		}
	}
	return nil
}

// inFlight are statuses in which a capture may exist that rebill has not
// recorded yet, or that a person is settling.
var inFlight = []charges.Status{charges.Capturing, charges.Unknown, charges.RequiresReview}

// judge counts one charge and checks its captures: those listed, and those
// of its attempts looked up by key (a capture filed under a day outside
// the search). It returns the captures found.
func (a *Auditor) judge(ctx context.Context, c charges.Charge, listed []capture, r *Report) ([]capture, error) {
	switch c.Status {
	case charges.Succeeded:
		r.Captured++
	case charges.Failed:
		r.Failed++
	case charges.Unknown, charges.RequiresReview:
		r.InReview++
	case charges.Voided:
		r.NotOwed++
	default:
		r.Open++
	}
	found := slices.Clone(listed)
	if g := a.gateway(c.Gateway); g != nil {
		for n := 1; n <= c.AttemptCount; n++ {
			key := fmt.Sprintf("%s:a%d:%s", c.Key(), n, gateway.OpCapture)
			if slices.ContainsFunc(found, func(x capture) bool { return x.op.IdempotencyKey == key }) {
				continue
			}
			res, err := g.Lookup(ctx, gateway.ByKey(gateway.OpCapture, key))
			if errors.Is(err, gateway.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("audit: look up %s: %w", key, err)
			}
			if res.Status == gateway.StatusSucceeded {
				found = append(found, capture{gateway: g.Name(), op: res})
			}
		}
	}
	id := c.ID
	add := func(kind string, cp *capture, format string, args ...any) {
		d := Discrepancy{Kind: kind, ChargeID: &id, ChargeKey: c.Key(), Gateway: c.Gateway, Detail: fmt.Sprintf(format, args...)}
		if cp != nil {
			d.Gateway, d.GatewayReference = cp.gateway, cp.op.Reference
		}
		r.Discrepancies = append(r.Discrepancies, d)
	}
	for i := range found {
		cp := &found[i]
		if i > 0 {
			add(DuplicateCapture, cp, "capture %d of the charge: %d %s under key %q", i+1, cp.op.Amount, cp.op.Currency, cp.op.IdempotencyKey)
		}
		if _, attempt, _, _ := charges.ParseGatewayKey(cp.op.IdempotencyKey); attempt == c.AttemptCount &&
			(cp.op.Amount != c.Amount || cp.op.Currency != c.Currency) {
			add(AmountMismatch, cp, "captured %d %s, the charge is %d %s", cp.op.Amount, cp.op.Currency, c.Amount, c.Currency)
		}
	}
	switch {
	case len(found) == 0 && c.Status == charges.Succeeded:
		add(MissingAtGateway, nil, "the charge succeeded but no gateway has its capture")
	case len(found) > 0 && c.Status != charges.Succeeded && !slices.Contains(inFlight, c.Status):
		add(StatusMismatch, &found[0], "captured at the gateway but the charge is %s", c.Status)
	}
	return found, nil
}

// strays reports the operations (captures or refunds, what names them)
// of the range's days whose key names no charge, as kind: operations of
// charges outside the range are judged with their own range's items.
func (a *Auditor) strays(ctx context.Context, ops map[string][]capture, owned map[string]bool, from, to time.Time,
	kind, what string, r *Report) error {
	var keys []string
	for key := range ops {
		if key != "" && !owned[key] {
			keys = append(keys, key)
		}
	}
	known, err := charges.ByKeys(ctx, a.DB, keys)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	exists := map[string]bool{}
	for _, c := range known {
		exists[c.Key()] = true
	}
	slices.Sort(keys)
	keys = append([]string{""}, keys...)
	for _, key := range keys {
		if exists[key] {
			continue
		}
		for _, cp := range ops[key] {
			if cp.op.At.Before(from) || !cp.op.At.Before(to) {
				continue
			}
			r.Discrepancies = append(r.Discrepancies, Discrepancy{Kind: kind, ChargeKey: key, Gateway: cp.gateway,
				GatewayReference: cp.op.Reference, Detail: fmt.Sprintf("a %s of %d %s under key %q names no charge",
					what, cp.op.Amount, cp.op.Currency, cp.op.IdempotencyKey)})
		}
	}
	return nil
}
