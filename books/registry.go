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
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/pg"
)

// What disagrees between rebill's postings and captures and a registry's
// book.
const (
	// AcceptedNotCaptured: the registry holds the payment accepted, but
	// rebill did not capture the attempt it posted, and the annulment
	// bound has passed: the fine counts money nobody paid.
	AcceptedNotCaptured Kind = "accepted_not_captured"
	// CapturedNotAccepted: rebill captured the attempt, but the registry
	// annulled its payment, does not know it, or has not accepted it:
	// the card paid and the fine is not paid.
	CapturedNotAccepted Kind = "captured_not_accepted"
	// ProcessingTooLong: the registry still has no outcome for the
	// payment past the annulment bound.
	ProcessingTooLong Kind = "processing_too_long"
)

// RegistryKinds lists every kind a registry day may report: the closed
// set of rebill_registry_reconciliation_discrepancies_total's kind label.
// AmountMismatch is shared with the gateways': the registry holds another
// amount than the posting (the amounts captured are the gateways' days').
var RegistryKinds = []Kind{AcceptedNotCaptured, CapturedNotAccepted, AmountMismatch, ProcessingTooLong}

// RegistryCheck is what one registry day's check concluded.
type RegistryCheck struct {
	// Found are the discrepancies, in a stable order (kind, charge,
	// payment id); GatewayReference is the payment id.
	Found []Discrepancy
	// Payments is how many of rebill's payments were judged.
	Payments int
	// Unsupported: the registry has no export, so the book was read by a
	// look-up per payment id.
	Unsupported bool
	// WaitUntil, when set, is when the last transient state found (a
	// payment still processing, an accepted one whose annulment or capture
	// is still within the bound) is past the bound: the day is not
	// concluded before then.
	WaitUntil time.Time
}

// book is the registry's word on one payment.
type book struct {
	status registry.RegistryStatus
	amount int64
	listed bool // from the export, with its amount
}

// CheckRegistry compares one registry gateway's book of one UTC day with
// rebill's postings and captures, read from db (the replica when there is
// one), at now on the service clock. The book is the gateway's export of
// the day; without one (registry.ErrExportUnsupported) every posting made
// that day that the gateway answered, or that no gateway answered, is
// looked up by payment id. Judged are rebill's payments the export lists
// (whenever their posting was made) and the postings made that day that
// the gateway answered (each looked up when the export does not list it,
// since the registry may file it under the next day). An accepted payment
// without a capture, or one still processing, is transient for bound
// after the posting's or the charge's last change, whichever is later.
// An error means nothing was concluded.
func CheckRegistry(ctx context.Context, db pg.DBTX, g registry.Gateway, day, now time.Time, bound time.Duration) (RegistryCheck, error) {
	day = Day(day)
	fail := func(err error) (RegistryCheck, error) {
		return RegistryCheck{}, fmt.Errorf("reconcile registry %s on %s: %w", g.Name(), day.Format(time.DateOnly), err)
	}
	var out RegistryCheck
	exported, err := registry.Export(ctx, g, day)
	if errors.Is(err, registry.ErrExportUnsupported) {
		out.Unsupported, err = true, nil
	}
	if err != nil {
		return fail(err)
	}
	books := make(map[string]book, len(exported))
	ids := make([]string, 0, len(exported))
	for _, e := range exported {
		books[e.PaymentID] = book{status: e.Status, amount: e.Amount, listed: true}
		ids = append(ids, e.PaymentID)
	}
	listed, err := charges.PostingsByIDs(ctx, db, ids)
	if err != nil {
		return fail(err)
	}
	made, err := charges.PostingsCreated(ctx, db, day, day.Add(24*time.Hour))
	if err != nil {
		return fail(err)
	}
	judged := listed
	for _, p := range made {
		if _, ok := books[p.PaymentID]; ok {
			continue
		}
		if p.Gateway != g.Name() && (!out.Unsupported || p.Gateway != "") {
			continue // another gateway's, or, with an export, one this gateway never took
		}
		status, err := registry.LookupStatus(ctx, g, p.PaymentID)
		if err != nil {
			return fail(fmt.Errorf("look up %s: %w", p.PaymentID, err))
		}
		books[p.PaymentID] = book{status: status}
		judged = append(judged, p)
	}
	chargeIDs := make([]uuid.UUID, len(judged))
	for i, p := range judged {
		chargeIDs[i] = p.ChargeID
	}
	cs, err := charges.ByIDs(ctx, db, chargeIDs)
	if err != nil {
		return fail(err)
	}
	byID := make(map[uuid.UUID]charges.Charge, len(cs))
	for _, c := range cs {
		byID[c.ID] = c
	}
	j := registryJudge{now: now, bound: bound, out: &out}
	for _, p := range judged {
		c, ok := byID[p.ChargeID]
		if !ok {
			return fail(fmt.Errorf("posting %s names charge %s, which is not there", p.PaymentID, p.ChargeID))
		}
		j.judge(p, books[p.PaymentID], c)
	}
	out.Payments = len(judged)
	slices.SortStableFunc(out.Found, func(a, b Discrepancy) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(chargeText(a.ChargeID), chargeText(b.ChargeID)),
			cmp.Compare(a.GatewayReference, b.GatewayReference))
	})
	return out, nil
}

type registryJudge struct {
	now   time.Time
	bound time.Duration
	out   *RegistryCheck
}

func (j registryJudge) add(kind Kind, p charges.Posting, format string, args ...any) {
	id := p.ChargeID
	j.out.Found = append(j.out.Found, Discrepancy{Kind: kind, ChargeID: &id, GatewayReference: p.PaymentID,
		Detail: fmt.Sprintf(format, args...)})
}

// transient reports whether a state that settles by itself may still be
// settling: within bound of since; it keeps the day open until then.
func (j registryJudge) transient(since time.Time) bool {
	until := since.Add(j.bound)
	if !j.now.Before(until) {
		return false
	}
	if until.After(j.out.WaitUntil) {
		j.out.WaitUntil = until
	}
	return true
}

func (j registryJudge) judge(p charges.Posting, b book, c charges.Charge) {
	captured := c.Status == charges.Succeeded && c.AttemptCount == p.Attempt
	since := p.UpdatedAt
	if c.UpdatedAt.After(since) {
		since = c.UpdatedAt
	}
	switch b.status {
	case registry.RegistryAccepted:
		if b.listed && b.amount != p.Amount {
			j.add(AmountMismatch, p, "the registry holds payment %s for %d, posting a%d is for %d", p.PaymentID, b.amount, p.Attempt, p.Amount)
		}
		if captured || j.transient(since) {
			return
		}
		j.add(AcceptedNotCaptured, p, "the registry holds payment %s (%d for UIN %s) accepted, but a%d was not captured: "+
			"the charge is %s at a%d and the posting %s, since %s", p.PaymentID, p.Amount, p.UIN, p.Attempt, c.Status,
			c.AttemptCount, p.Status, since.Format(time.RFC3339))
	case registry.RegistryProcessing:
		if captured {
			j.add(CapturedNotAccepted, p, "a%d was captured but the registry has not accepted its payment %s (%d): still processing",
				p.Attempt, p.PaymentID, p.Amount)
			return
		}
		if j.transient(since) {
			return
		}
		j.add(ProcessingTooLong, p, "the registry has had payment %s (%d for UIN %s) processing since before %s; the posting is %s",
			p.PaymentID, p.Amount, p.UIN, since.Format(time.RFC3339), p.Status)
	default: // annulled, not found
		if captured {
			j.add(CapturedNotAccepted, p, "a%d was captured but the registry's payment %s (%d for UIN %s) is %s: the fine is not paid",
				p.Attempt, p.PaymentID, p.Amount, p.UIN, b.status)
		}
	}
}
