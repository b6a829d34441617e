package soak

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// EventsMatchTransitions: every real transition has exactly one event. The
// log begins with created, each event starts where the one before ended,
// each type moves between the statuses the contract gives it (decision
// 12), nothing follows cancelled, the last event ends at the current
// status, a cancel is scheduled at most once, the service clock never runs
// backwards through it, and (observed) every card change that answered 200
// with a different card logged exactly one payment_method_updated.
func EventsMatchTransitions(d *Data) []Violation {
	var out []Violation
	allowed := map[string]func(from, to string) bool{
		"created":     func(f, t string) bool { return f == "" && (t == "active" || t == "trialing") },
		"trial_ended": func(f, t string) bool { return f == "trialing" && t == "active" },
		"updated":     func(f, t string) bool { return f == t && f != "cancelled" && f != "" },
		"update_scheduled": func(f, t string) bool {
			return f == t && f != "cancelled" && f != ""
		},
		"update_removed": func(f, t string) bool { return f == t && f != "" },
		// A paused subscription logs paused again when its pause takes
		// another on_resume (decision 4).
		"paused":  func(f, t string) bool { return (f == "active" || f == "paused") && t == "paused" },
		"resumed": func(f, t string) bool { return f == "paused" && t == "active" },
		"cancelled": func(f, t string) bool {
			return f != "cancelled" && f != "" && t == "cancelled"
		},
		"cancel_scheduled": func(f, t string) bool {
			return f == t && (f == "active" || f == "past_due" || f == "paused" || f == "trialing")
		},
		"payment_method_updated": func(f, t string) bool {
			return (f == t && f != "cancelled" && f != "") || (f == "unpaid" && t == "past_due")
		},
		"past_due":    func(f, t string) bool { return t == "past_due" && (f == "active" || f == "unpaid") },
		"unpaid":      func(f, t string) bool { return t == "unpaid" && (f == "active" || f == "past_due") },
		"reactivated": func(f, t string) bool { return t == "active" && (f == "past_due" || f == "unpaid") },
	}
	for _, s := range d.Subscriptions {
		v := func(format string, args ...any) {
			out = append(out, viol("events-match-transitions", s.ID, "", fmt.Sprintf(format, args...)))
		}
		ev := append([]Event(nil), s.Events...)
		sort.Slice(ev, func(i, j int) bool { return ev[i].ID < ev[j].ID })
		if len(ev) == 0 {
			v("no events")
			continue
		}
		created, scheduled, cardEvents := 0, 0, 0
		for i, e := range ev {
			ok, known := allowed[e.Type]
			switch {
			case !known:
				v("event %d: unknown type %q", e.ID, e.Type)
			case !ok(e.From, e.To):
				v("event %d: %s from %q to %q", e.ID, e.Type, e.From, e.To)
			}
			if i == 0 && e.Type != "created" {
				v("the log begins with %s", e.Type)
			}
			if i > 0 {
				p := ev[i-1]
				if e.From != p.To {
					v("event %d (%s) starts from %s but event %d (%s) ended at %s", e.ID, e.Type, e.From, p.ID, p.Type, p.To)
				}
				if e.At.Before(p.At) {
					v("event %d (%s) at %s is earlier than event %d (%s) at %s", e.ID, e.Type, fmtT(e.At), p.ID, p.Type, fmtT(p.At))
				}
				if p.Type == "cancelled" {
					v("event %d (%s) after cancelled", e.ID, e.Type)
				}
			}
			switch e.Type {
			case "created":
				created++
			case "cancel_scheduled":
				scheduled++
			case "payment_method_updated":
				cardEvents++
			}
		}
		if created != 1 {
			v("%d created events", created)
		}
		if scheduled > 1 {
			v("%d cancel_scheduled events (a repeated schedule changes nothing)", scheduled)
		}
		if last := ev[len(ev)-1]; last.To != s.Status {
			v("the last event (%d, %s) ends at %s but the subscription is %s", last.ID, last.Type, last.To, s.Status)
		}
		if obs := observed(d, s.ID); obs != nil && len(obs.Cards) > 0 {
			sure, unsure := 0, 0
			for _, c := range obs.Cards[1:] {
				switch {
				case c.Same:
				case c.Unsure:
					unsure++
				default:
					sure++
				}
			}
			if cardEvents < sure || cardEvents > sure+unsure {
				v("%d payment_method_updated events for %d card changes answered 200 (%d more unanswered)", cardEvents, sure, unsure)
			}
		}
	}
	sortViolations(out)
	return out
}

// NoChargeLeftOpen: once things settled, every charge is final (succeeded,
// failed, voided, or in review with a reason), except a declined one
// waiting by design for its next dunning attempt (next_attempt_at ahead
// of the service clock).
func NoChargeLeftOpen(d *Data) []Violation {
	var out []Violation
	for _, s := range d.Subscriptions {
		for _, c := range s.Charges {
			switch c.Status {
			case "succeeded", "failed", "voided":
			case "requires_review":
				if c.ReviewReason == "" {
					out = append(out, viol("no-charge-left-open", s.ID, c.Key, "in review without a reason"))
				}
			case "declined":
				if c.NextAttemptAt == nil || !c.NextAttemptAt.After(d.Now) {
					out = append(out, viol("no-charge-left-open", s.ID, c.Key,
						fmt.Sprintf("declined, its next attempt (%v) overdue at %s", c.NextAttemptAt, fmtT(d.Now))))
				}
			default:
				w := ""
				if c.NextAttemptAt != nil {
					w = ", next_attempt_at " + fmtT(*c.NextAttemptAt)
				}
				out = append(out, viol("no-charge-left-open", s.ID, c.Key,
					fmt.Sprintf("left %s at attempt %d (failure_code %q%s)", c.Status, c.AttemptCount, c.FailureCode, w)))
			}
		}
	}
	sortViolations(out)
	return out
}

// LedgerAgreesWithCharges: rebill's charges and the gateways' books tell
// the same story. A succeeded charge has exactly one succeeded capture; a
// voided, failed, declined or not yet captured one has none; one in review
// or in flight at most one; and every capture belongs to a charge rebill
// has.
func LedgerAgreesWithCharges(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	charges := chargesByKey(d)
	subs := map[string]bool{}
	for _, s := range d.Subscriptions {
		subs[s.ID] = true
		for _, c := range s.Charges {
			n := len(l.captures(c.Key))
			bad := false
			switch c.Status {
			case "succeeded":
				bad = n != 1
			case "voided", "failed", "declined", "scheduled", "authorizing", "authorized":
				bad = n != 0
			default: // capturing, unknown, requires_review
				bad = n > 1
			}
			if bad {
				out = append(out, viol("ledger-agrees", s.ID, c.Key,
					fmt.Sprintf("charge %s (attempt %d) but the gateways recorded %d succeeded captures: %s",
						c.Status, c.AttemptCount, n, describeOps(l.byCharge[c.Key]))))
			}
		}
	}
	for key := range l.byCharge {
		if subs[subOfKey(key)] && charges[key] == nil && len(l.captures(key)) > 0 {
			out = append(out, viol("ledger-agrees", subOfKey(key), key, "captured at a gateway, but rebill has no such charge"))
		}
	}
	sortViolations(out)
	return out
}

// StatusAgreesWithCharges: a subscription's status matches its charges
// once things settled. past_due means a period is unpaid and being
// collected, so some charge is not yet paid (declined, failed, in review
// or in flight); unpaid means dunning gave up on a charge, so some charge
// failed.
func StatusAgreesWithCharges(d *Data) []Violation {
	var out []Violation
	for _, s := range d.Subscriptions {
		var unsettled, failed bool
		for _, c := range s.Charges {
			switch c.Status {
			case "succeeded", "voided":
			case "failed":
				failed = true
				unsettled = unsettled || c.Resolution == ""
			default:
				unsettled = true
			}
		}
		switch {
		case s.Status == "past_due" && !unsettled:
			out = append(out, viol("status-agrees", s.ID, "", "past_due, yet every charge is paid, voided or resolved"))
		case s.Status == "unpaid" && !failed:
			out = append(out, viol("status-agrees", s.ID, "", "unpaid, yet no charge failed"))
		}
	}
	return out
}

// NoSlotOutlivesItsAttempt: a declines-limit slot is held only by a
// charge's attempt still in flight (authorizing, or unknown until its
// look-up settles it). One left by an attempt that ended keeps the
// customer's other charges waiting until midnight UTC (decision 32).
func NoSlotOutlivesItsAttempt(d *Data) []Violation {
	byID := map[string]Charge{}
	for _, s := range d.Subscriptions {
		for _, c := range s.Charges {
			byID[c.ID] = c
		}
	}
	var out []Violation
	for _, slot := range d.Slots {
		id, attempt, _ := strings.Cut(slot.Holder, "/")
		c, ok := byID[id]
		switch {
		case !ok:
			out = append(out, viol("slot-outlives-attempt", "", id, "customer "+slot.Customer+" holds slot "+slot.Holder+" of no subscription charge"))
		case strconv.Itoa(c.AttemptCount) != attempt || (c.Status != "authorizing" && c.Status != "unknown"):
			out = append(out, viol("slot-outlives-attempt", c.SubscriptionID, c.ID, fmt.Sprintf(
				"slot %s is held while the charge is %s at attempt %d", slot.Holder, c.Status, c.AttemptCount)))
		}
	}
	return out
}
