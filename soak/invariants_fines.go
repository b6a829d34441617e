package soak

import (
	"fmt"
	"strconv"
	"strings"
)

// FineHoldNotLeftUnposted: once everything settled, no fine's charge still
// holds money (authorized) for an attempt whose posting to the registry
// will not be made (cancelled or failed, or none at all): such a hold,
// released unposted because more was paid outside rebill meanwhile or
// because it could no longer be posted in time, is voided and the charge
// moves on.
func FineHoldNotLeftUnposted(d *Data) []Violation {
	var out []Violation
	for _, f := range d.Fines {
		for _, b := range f.Bills {
			if b.ChargeStatus != "authorized" || b.Posting == "accepted" || b.Posting == "posting" {
				continue
			}
			posting := b.Posting
			if posting == "" {
				posting = "none"
			}
			out = append(out, viol(UnpostedHoldReleased, "fine "+f.UIN, b.ChargeKey, fmt.Sprintf("fine %s: the charge is left "+
				"authorized at a%d, its posting %s; book: %s", f.UIN, b.Attempt, posting, f.describeBook())))
		}
	}
	sortViolations(out)
	return out
}

// PaidElsewhereNotPaidByRebill: a fine one of whose copies rebill marked
// paid_elsewhere (paid in full outside rebill, so nothing of rebill's
// was to be held for it) has no capture of rebill's, by any copy, and no
// posting of rebill's standing accepted in the registry's book.
func PaidElsewhereNotPaidByRebill(d *Data) []Violation {
	var out []Violation
	for _, f := range d.Fines {
		var elsewhere []string
		for _, b := range f.Bills {
			if b.Status == "paid_elsewhere" {
				elsewhere = append(elsewhere, b.EnrollmentID)
			}
		}
		if len(elsewhere) == 0 {
			continue
		}
		for _, c := range f.Captures {
			out = append(out, viol(PaidElsewhereUnpaid, "fine "+f.UIN, c.ChargeKey, fmt.Sprintf("fine %s is paid_elsewhere (enrollments %s) "+
				"but a%d captured %d at %s; book: %s", f.UIN, strings.Join(elsewhere, ", "), c.Attempt, c.Amount, fmtT(c.At), f.describeBook())))
		}
		for _, e := range f.Book {
			if e.ChargeKey != "" && e.Status == "accepted" {
				out = append(out, viol(PaidElsewhereUnpaid, "fine "+f.UIN, e.ChargeKey, fmt.Sprintf("fine %s is paid_elsewhere (enrollments %s) "+
					"but rebill's posting %s of a%d (%d) stands accepted in the registry's book", f.UIN, strings.Join(elsewhere, ", "),
					e.PaymentID, e.Attempt, e.Amount)))
			}
		}
	}
	sortViolations(out)
	return out
}

// FineNotOverpaidByRebill: rebill's captures never make a fine paid
// beyond its full price. The registry's book is read in the order it was
// written: when a posting of rebill's whose attempt was captured is
// written, what stood paid outside rebill until then plus what rebill
// captured (that attempt included) is at most the full price. A payment
// made outside rebill after rebill's posting overpays the fine on the
// payer's account, not rebill's, and is not counted against it.
func FineNotOverpaidByRebill(d *Data) []Violation {
	var out []Violation
	for _, f := range d.Fines {
		captured := map[string]FineOp{}
		for _, c := range f.Captures {
			captured[c.ChargeKey+"#"+strconv.Itoa(c.Attempt)] = c
		}
		var outside, own int64
		for _, e := range f.Book {
			if e.Outside() {
				if e.Stands() {
					outside += e.Amount
				}
				continue
			}
			c, ok := captured[e.ChargeKey+"#"+strconv.Itoa(e.Attempt)]
			if !ok || e.ChargeKey == "" {
				continue
			}
			delete(captured, e.ChargeKey+"#"+strconv.Itoa(e.Attempt))
			own += c.Amount
			if outside+own > f.Amount {
				out = append(out, viol(FineNotOverpaid, "fine "+f.UIN, c.ChargeKey, fmt.Sprintf("fine %s (full price %d): a%d captured %d after "+
					"%d was paid outside rebill and %d captured by rebill before it: %d in all; book: %s", f.UIN, f.Amount, c.Attempt,
					c.Amount, outside, own-c.Amount, outside+own, f.describeBook())))
			}
		}
	}
	sortViolations(out)
	return out
}

// FinePaidBeforeHoldNotCaptured: a fine paid in full outside rebill
// before rebill's first hold of it (any copy, stamped on the service
// clock, like the book) is never captured by rebill: the check before
// the hold, or the one before posting, sees it. In full is what the
// payments made outside rebill add up to, read in the book's order:
// the full price, or the discounted price by a payment made before the
// discount ended (a fine paid at its discount in time is paid, whenever
// rebill asks afterwards).
func FinePaidBeforeHoldNotCaptured(d *Data) []Violation {
	var out []Violation
	for _, f := range d.Fines {
		if len(f.Captures) == 0 {
			continue
		}
		paid, ok := f.paidInFull()
		if !ok {
			continue
		}
		var first *FineOp
		for i, h := range f.Holds {
			if first == nil || h.At.Before(first.At) {
				first = &f.Holds[i]
			}
		}
		if first != nil && !paid.At.Before(first.At) {
			continue
		}
		hold := "no hold"
		if first != nil {
			hold = fmt.Sprintf("its first hold (%s a%d) at %s", first.ChargeKey, first.Attempt, fmtT(first.At))
		}
		for _, c := range f.Captures {
			out = append(out, viol(PaidBeforeHold, "fine "+f.UIN, c.ChargeKey, fmt.Sprintf("fine %s paid in full outside rebill by %s at %s, "+
				"before %s, yet a%d captured %d at %s; book: %s", f.UIN, paid.PaymentID, fmtT(paid.At), hold, c.Attempt, c.Amount,
				fmtT(c.At), f.describeBook())))
		}
	}
	sortViolations(out)
	return out
}

// paidInFull is the payment made outside rebill with which those made
// outside rebill first covered the fine (see FinePaidBeforeHoldNotCaptured).
func (f Fine) paidInFull() (BookEntry, bool) {
	var sum int64
	for _, e := range f.Book {
		if !e.Outside() || !e.Stands() {
			continue
		}
		sum += e.Amount
		discounted := f.DiscountedAmount != nil && f.DiscountEnds != nil && e.At.Before(*f.DiscountEnds) && sum >= *f.DiscountedAmount
		if sum >= f.Amount || discounted {
			return e, true
		}
	}
	return BookEntry{}, false
}

// describeBook renders the fine's book for a violation's detail.
func (f Fine) describeBook() string {
	if len(f.Book) == 0 {
		return "empty"
	}
	parts := make([]string, len(f.Book))
	for i, e := range f.Book {
		who := e.Gateway
		if e.ChargeKey != "" {
			who = fmt.Sprintf("%s by %s a%d", e.Gateway, e.ChargeKey, e.Attempt)
		}
		parts[i] = fmt.Sprintf("#%d %s %d %s at %s", e.Seq, who, e.Amount, e.Status, fmtT(e.At))
	}
	return strings.Join(parts, "; ")
}
