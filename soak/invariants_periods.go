package soak

import (
	"fmt"
	"strings"
	"time"
)

// AtMostOneCapturePerPeriod: no period has more than one succeeded capture,
// whatever its attempts and gateways, and no two charges bill one period.
func AtMostOneCapturePerPeriod(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	for key := range l.byCharge {
		if caps := l.captures(key); len(caps) > 1 {
			out = append(out, viol("at-most-one-capture", subOfKey(key), key,
				fmt.Sprintf("%d succeeded captures: %s", len(caps), describeOps(caps))))
		}
	}
	for _, s := range d.Subscriptions {
		starts := map[time.Time]string{}
		for _, c := range s.Charges {
			if c.Adjustment() {
				continue // a change's adjustment shares its period's start
			}
			if other, ok := starts[c.PeriodStart.UTC()]; ok && !restartedAt(s, c.PeriodStart, other, c.Key) {
				out = append(out, viol("at-most-one-capture", s.ID, c.Key,
					fmt.Sprintf("two charges for the period starting %s: %s and %s", fmtT(c.PeriodStart), other, c.Key)))
			}
			starts[c.PeriodStart.UTC()] = c.Key
		}
	}
	sortViolations(out)
	return out
}

// restartedAt reports whether charges a and b of one start are the
// periods of two schedules: one charged before an immediate interval change
// made in the instant it began, and the first of the schedule that change
// started (its key with the change's suffix, the other's without).
func restartedAt(s Subscription, start time.Time, a, b string) bool {
	for _, ch := range appliedChanges(s.Changes) {
		suf := ch.RestartSuffix()
		if suf == "" || !ch.AppliedAt.Equal(start) {
			continue
		}
		if strings.HasSuffix(a, suf) != strings.HasSuffix(b, suf) {
			return true
		}
	}
	return false
}

// NoCaptureWithoutAuthorization: every capture and void acts on a
// succeeded authorization of the same attempt at the same gateway, for
// the same amount, and the gateway accepted it (a refused capture is
// rebill capturing what it did not hold).
func NoCaptureWithoutAuthorization(d *Data) []Violation {
	var out []Violation
	auths := map[string]LedgerOp{} // gateway|charge|attempt -> authorize
	for _, o := range d.Ledger {
		if o.Op == "authorize" {
			auths[fmt.Sprintf("%s|%s|%d", o.Gateway, o.ChargeKey(), o.Attempt())] = o
		}
	}
	for _, o := range d.Ledger {
		if o.Op == "authorize" || o.Op == "refund" {
			continue // a refund names no attempt: the refund checks judge it
		}
		key := o.ChargeKey()
		a, ok := auths[fmt.Sprintf("%s|%s|%d", o.Gateway, key, o.Attempt())]
		switch {
		case !ok:
			out = append(out, viol("capture-has-authorization", subOfKey(key), key,
				fmt.Sprintf("%s without an authorization of attempt %d at %s (%s)", o.Op, o.Attempt(), o.Gateway, o.IdempotencyKey)))
		case a.Status != "succeeded" && o.Status == "succeeded":
			out = append(out, viol("capture-has-authorization", subOfKey(key), key,
				fmt.Sprintf("%s succeeded on an authorization that %s", o.Op, a.Status)))
		case o.Op == "capture" && o.Amount != a.Amount:
			out = append(out, viol("capture-has-authorization", subOfKey(key), key,
				fmt.Sprintf("capture of %d on an authorization of %d", o.Amount, a.Amount)))
		case o.Op == "capture" && o.Status != "succeeded":
			out = append(out, viol("capture-has-authorization", subOfKey(key), key,
				fmt.Sprintf("the gateway refused a capture (%s %s): rebill captured a hold it did not have", o.Status, o.DeclineCode)))
		}
	}
	sortViolations(out)
	return out
}

// OwedPeriodsSettled judges every period against the contract: a period
// that began while the subscription was active or past due is owed and
// ends with exactly one capture, or failed for good, or in review with a
// reason, or voided because the subscription was cancelled later; one that
// began while it was paused, unpaid or cancelled (or after a scheduled
// cancel took effect) is never captured, except that one that began after
// the dunning ended but before the end was processed may keep a capture
// already sent (at most one); where the record cannot tell, at most one
// capture. A failed charge must also have been retried by any
// later change to a card that authorizes, made while the subscription was
// past due or unpaid (decision 7).
func OwedPeriodsSettled(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	var moves []ClockMove
	if d.Observed != nil {
		moves = d.Observed.ClockMoves
	}
	for _, s := range d.Subscriptions {
		obs := observed(d, s.ID)
		tl := BuildTimeline(s, obs, moves)
		for _, p := range tl.Problems {
			out = append(out, viol("owed-periods-settled", s.ID, "", "history: "+p))
		}
		byStart := map[time.Time]*Charge{}
		for i := range s.Charges {
			if !s.Charges[i].Adjustment() {
				byStart[s.Charges[i].PeriodStart.UTC()] = &s.Charges[i]
			}
		}
		covered := map[time.Time]bool{} // periods paid by credit alone
		for _, cr := range s.Credits {
			if cr.Amount < 0 && cr.PeriodStart != nil {
				covered[cr.PeriodStart.UTC()] = true
			}
		}
		onGrid := map[time.Time]bool{}
		for _, p := range tl.Periods(d.Now, moves) {
			onGrid[p.Start] = true
			c := byStart[p.Start]
			v := func(format string, args ...any) {
				key := ""
				if c != nil {
					key = c.Key
				}
				out = append(out, Violation{Invariant: "owed-periods-settled", Subscription: s.ID, Charge: key,
					Detail: fmt.Sprintf("period %s (%s, grid %d, began while %s, %s): ", p.Key, fmtT(p.Start), p.Segment,
						joinStatuses(p.Statuses), p.Owed) + fmt.Sprintf(format, args...)})
			}
			caps := 0
			if c != nil {
				caps = len(l.captures(c.Key))
			}
			switch p.Owed {
			case NotOwed:
				// Began after the dunning ended but before the end was
				// processed: an attempt whose capture was already sent
				// then stands (decision 7), so at most one capture.
				if caps > 1 || (caps > 0 && !p.UnpaidAsOf) {
					v("captured %d times", caps)
				}
			case Unsure:
				if caps > 1 {
					v("captured %d times", caps)
				}
			case IsOwed:
				if c == nil && covered[p.Start] {
					continue // credit paid it all: prices-in-force judges the amount
				}
				if c == nil {
					if tl.CancelledAfter(p.Start) && tl.cancelledSoonAfter(p.DueFrom) {
						continue // cancelled before its charge was created: nothing to collect
					}
					if sameDayPeriod(s, p) {
						continue // decision 5: a resume on the day a charged period began starts that period again
					}
					v("never charged (no charge for this period start)")
					continue
				}
				switch c.Status {
				case "succeeded":
					if caps != 1 {
						v("succeeded with %d captures", caps)
					}
				case "failed":
					// judged for every charge below
				case "requires_review":
					if c.ReviewReason == "" {
						v("in review without a reason")
					}
				case "voided":
					if !tl.CancelledAfter(p.Start) {
						v("voided (%s) although the subscription was never cancelled after it began", c.FailureCode)
					}
				case "declined":
					if c.NextAttemptAt == nil || !c.NextAttemptAt.After(d.Now) {
						v("declined and not waiting (next_attempt_at %v, now %s)", c.NextAttemptAt, fmtT(d.Now))
					}
				default:
					v("left %s", c.Status)
				}
			}
		}
		for _, c := range s.Charges {
			if c.Status == "failed" && c.Resolution != "failed" {
				out = append(out, failedForGood(s, c, l, obs)...)
			}
			if !c.Adjustment() && !onGrid[c.PeriodStart.UTC()] && len(l.captures(c.Key)) > 0 {
				out = append(out, viol("owed-periods-settled", s.ID, c.Key,
					fmt.Sprintf("captured a period starting %s that is on none of the subscription's grids", fmtT(c.PeriodStart))))
			}
		}
	}
	sortViolations(out)
	return out
}

// failedForGood judges a failed charge that no person resolved: its last
// attempt was declined (or refused) at the gateway, and no card that
// authorizes, given while the subscription was past due or unpaid after
// that attempt, was left untried (decision 7: waiting charges are retried
// at once with the new card).
func failedForGood(s Subscription, c Charge, l ledger, obs *ObservedSubscription) []Violation {
	var out []Violation
	v := func(format string, args ...any) {
		out = append(out, viol("owed-periods-settled", s.ID, c.Key, fmt.Sprintf("period %s: ", c.PeriodKey)+fmt.Sprintf(format, args...)))
	}
	last := l.attemptOps(c.Key, c.AttemptCount)
	declined := false
	for _, o := range last {
		declined = declined || (o.Op == "authorize" && o.Status != "succeeded")
	}
	if !declined {
		v("failed although its last attempt a%d was not declined at the gateway (ledger: %s)", c.AttemptCount, describeOps(last))
	}
	if obs == nil || len(obs.Cards) < 2 {
		return out
	}
	lastAt := time.Time{}
	for _, o := range l.byCharge[c.Key] {
		lastAt = maxTime(lastAt, o.At)
	}
	for _, card := range obs.Cards[1:] {
		if card.Good && !card.Same && !card.Unsure && card.StatusAfter == "past_due" && card.When.Sent.After(lastAt.Add(slack)) {
			v("failed, but a good card (…%s) given at %s after its last attempt (%s) did not retry it",
				card.Last4, card.When.Sent.Format("15:04:05.000"), lastAt.Format("15:04:05.000"))
			break
		}
	}
	return out
}

// slack absorbs the scheduling jitter between the driver's clock readings
// and the database's on one machine.
const slack = 50 * time.Millisecond

// cancelledSoonAfter: a person's immediate cancel answered within
// scanLag of due (the real time a period's charge could first be created),
// so the scan may never have created its charge. Without an observer any
// later cancel counts.
func (tl *Timeline) cancelledSoonAfter(due time.Time) bool {
	if tl.cancelBySystem {
		return false
	}
	if tl.cancelPerson == nil || due.IsZero() {
		return true
	}
	return tl.cancelPerson.Sub(due) < scanLag
}

// scanLag bounds how long after its start the scan creates a period's
// charge on a healthy system; crashes and terminated connections are
// included.
const scanLag = 60 * time.Second

func observed(d *Data, id string) *ObservedSubscription {
	if d.Observed == nil {
		return nil
	}
	return d.Observed.Subscriptions[id]
}

// NoCaptureAfterCancel: no capture is sent after the subscription's cancel
// took effect; a capture sent before may finish after. Judged twice: no
// period that starts after the cancel (at or after, for a cancel at period
// end) is captured; and, for immediate cancels the driver made, a capture
// the gateway recorded after the cancel answered belongs to an attempt
// that was capturing (or unknown, or already succeeded) right after it. A
// charge that went to review is left to the people (a capture sent before
// the cancel may have landed late).
func NoCaptureAfterCancel(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	for _, s := range d.Subscriptions {
		if s.CancelledAt == nil {
			continue
		}
		bySystem := false
		for _, e := range s.Events {
			if e.Type == "cancelled" {
				bySystem = e.System()
			}
		}
		for _, c := range s.Charges {
			after := c.PeriodStart.After(*s.CancelledAt) || (bySystem && c.PeriodStart.Equal(*s.CancelledAt))
			if caps := l.captures(c.Key); after && len(caps) > 0 {
				out = append(out, viol("no-capture-after-cancel", s.ID, c.Key,
					fmt.Sprintf("period starting %s captured although the subscription was cancelled as of %s: %s",
						fmtT(c.PeriodStart), fmtT(*s.CancelledAt), describeOps(caps))))
			}
		}
		obs := observed(d, s.ID)
		if obs == nil {
			continue
		}
		final := map[string]*Charge{}
		for i := range s.Charges {
			final[s.Charges[i].Key] = &s.Charges[i]
		}
		for _, cancel := range obs.Cancels {
			states := map[string]ChargeState{}
			for _, st := range cancel.Charges {
				states[st.Key] = st
			}
			for _, c := range s.Charges {
				if c.Status == "requires_review" {
					continue
				}
				for _, o := range l.captures(c.Key) {
					if !o.At.After(cancel.When.Answered.Add(slack)) {
						continue
					}
					st, seen := states[c.Key]
					ok := seen && st.Attempt == o.Attempt() &&
						(st.Status == "capturing" || st.Status == "succeeded" || (st.Status == "unknown" && st.UnknownPhase != "authorize"))
					if !ok {
						was := "not created yet"
						if seen {
							was = fmt.Sprintf("%s at attempt %d", st.Status, st.Attempt)
							if st.UnknownPhase != "" {
								was += " (unknown phase " + st.UnknownPhase + ")"
							}
						}
						out = append(out, viol("no-capture-after-cancel", s.ID, c.Key,
							fmt.Sprintf("capture of attempt %d recorded at %s, after the cancel answered at %s, when the charge was %s right after the cancel",
								o.Attempt(), o.At.Format("15:04:05.000"), cancel.When.Answered.Format("15:04:05.000"), was)))
					}
				}
			}
		}
	}
	sortViolations(out)
	return out
}

// NoDanglingHolds: every succeeded authorization is captured or voided
// once things settled, except one of a charge in review whose
// review_reason says why.
func NoDanglingHolds(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	charges := chargesByKey(d)
	for key, ops := range l.byCharge {
		for _, a := range ops {
			if a.Op != "authorize" || a.Status != "succeeded" {
				continue
			}
			settled := false
			for _, o := range ops {
				if o.Gateway == a.Gateway && o.Attempt() == a.Attempt() && o.Op != "authorize" && o.Status == "succeeded" {
					settled = true
				}
			}
			if settled {
				continue
			}
			c := charges[key]
			if c != nil && c.Status == "requires_review" && c.ReviewReason != "" {
				continue
			}
			status := "unknown to rebill"
			if c != nil {
				status = c.Status
				if c.Resolution != "" {
					status += " (resolved " + c.Resolution + " by a person)"
				}
			}
			out = append(out, viol("no-dangling-holds", subOfKey(key), key,
				fmt.Sprintf("authorization of attempt %d at %s (%s) neither captured nor voided; the charge is %s",
					a.Attempt(), a.Gateway, a.Reference, status)))
		}
	}
	sortViolations(out)
	return out
}

// OperationsUseCurrentCard: every gateway operation of an attempt used the
// payment method that was the subscription's when the attempt started.
// The driver knows when each card was given (a request's [sent, answered]
// interval) but not exactly when an attempt started: not before its
// charge could exist (first attempt) or before the previous attempt's
// last answer at the gateway (later ones), and not after its authorize
// reached the gateway. A card that may have been current at any moment of
// that window is accepted; any other card is a violation. Captures and
// voids use their authorization's card.
func OperationsUseCurrentCard(d *Data) []Violation {
	if d.Observed == nil {
		return nil
	}
	var out []Violation
	l := indexLedger(d.Ledger)
	for _, s := range d.Subscriptions {
		obs := observed(d, s.ID)
		if obs == nil || len(obs.Cards) == 0 {
			continue
		}
		tl := BuildTimeline(s, obs, d.Observed.ClockMoves)
		due := map[time.Time]time.Time{}
		for _, p := range tl.Periods(d.Now, d.Observed.ClockMoves) {
			due[p.Start] = p.DueFrom
		}
		for _, c := range s.Charges {
			lower := due[c.PeriodStart.UTC()]
			if lower.IsZero() {
				lower = obs.Created.Sent
			}
			for attempt := 1; attempt <= c.AttemptCount; attempt++ {
				ops := l.attemptOps(c.Key, attempt)
				if len(ops) == 0 {
					continue
				}
				var auth *LedgerOp
				last := time.Time{}
				for i := range ops {
					if ops[i].Op == "authorize" {
						auth = &ops[i]
					}
					if ops[i].At.After(last) {
						last = ops[i].At
					}
				}
				if auth == nil {
					lower = maxTime(lower, last)
					continue // reported by capture-has-authorization
				}
				for _, o := range ops {
					if o.Gateway != auth.Gateway || o.TokenLast4 != auth.TokenLast4 {
						out = append(out, viol("current-card", s.ID, c.Key,
							fmt.Sprintf("attempt %d: %s at %s with card …%s, its authorization at %s with …%s",
								attempt, o.Op, o.Gateway, o.TokenLast4, auth.Gateway, auth.TokenLast4)))
					}
				}
				allowed := cardsCurrentDuring(obs.Cards, lower.Add(-slack), auth.At.Add(slack))
				ok := false
				for _, card := range allowed {
					ok = ok || (card.Gateway == auth.Gateway && card.Last4 == auth.TokenLast4)
				}
				if !ok {
					names := make([]string, len(allowed))
					for i, card := range allowed {
						names[i] = card.Gateway + "/…" + card.Last4
					}
					out = append(out, viol("current-card", s.ID, c.Key,
						fmt.Sprintf("attempt %d authorized at %s with %s/…%s at %s; the cards current between %s and then were %s",
							attempt, auth.Gateway, auth.Gateway, auth.TokenLast4, auth.At.Format("15:04:05.000"),
							lower.Format("15:04:05.000"), strings.Join(names, ", "))))
				}
				lower = maxTime(lower, last)
			}
		}
	}
	sortViolations(out)
	return out
}

// cardsCurrentDuring lists the cards that may have been the subscription's
// at some moment of [from, to]. Card i may be current from when its
// request was sent until the next change's answer (a request commits
// somewhere in between); a change whose answer never came may or may not
// have happened.
func cardsCurrentDuring(cards []ObservedCard, from, to time.Time) []ObservedCard {
	var out []ObservedCard
	for i, c := range cards {
		if c.Same {
			continue
		}
		if c.When.Sent.After(to) {
			continue
		}
		end := time.Time{} // open
		for _, n := range cards[i+1:] {
			if n.Same || n.Unsure {
				continue
			}
			end = n.When.Answered
			break
		}
		if !end.IsZero() && end.Before(from) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
