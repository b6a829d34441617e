package soak

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"
)

// Names of the checks of subscriptions that change.
const (
	PricesInForce         = "prices-in-force"
	AdjustmentsExact      = "adjustments-exact"
	CreditsWithinCaptured = "credits-within-captured"
)

// PeriodsChargedAtThePriceInForce: every period is charged at the price in
// force when it began, less the credit it used: the price asked at
// creation, then each change's from when it took effect (a change at
// period end from exactly that boundary, one made now from the next
// period; an interval change starts its own first period at the new
// price). A period that credit paid in full has no charge, and the credit
// it used is that price. Where an immediate change of the amount and a
// period's start fall in one instant of the service clock, either price
// stands.
func PeriodsChargedAtThePriceInForce(d *Data) []Violation {
	var out []Violation
	for _, s := range d.Subscriptions {
		applied := appliedChanges(s.Changes)
		used := map[string]int64{}
		for _, cr := range s.Credits {
			if cr.Amount < 0 {
				used[cr.PeriodKey] -= cr.Amount
			}
		}
		charged := map[string]bool{}
		for _, c := range s.Charges {
			if c.Adjustment() {
				continue
			}
			charged[c.PeriodKey] = true
			prices := pricesAt(s, applied, c.PeriodStart, c.PeriodKey)
			if got := c.Amount + used[c.PeriodKey]; !containsPrice(prices, got) {
				out = append(out, viol(PricesInForce, s.ID, c.Key, fmt.Sprintf(
					"period starting %s charged %d with %d of credit (%d), but the price in force then was %s",
					fmtT(c.PeriodStart), c.Amount, used[c.PeriodKey], got, describePrices(prices))))
			}
		}
		for _, cr := range s.Credits {
			if cr.Amount >= 0 || charged[cr.PeriodKey] || cr.PeriodStart == nil {
				continue
			}
			prices := pricesAt(s, applied, *cr.PeriodStart, cr.PeriodKey)
			if !containsPrice(prices, used[cr.PeriodKey]) {
				out = append(out, viol(PricesInForce, s.ID, s.ID+":"+cr.PeriodKey, fmt.Sprintf(
					"period starting %s has no charge and used %d of credit, but its price was %s",
					fmtT(*cr.PeriodStart), used[cr.PeriodKey], describePrices(prices))))
			}
		}
	}
	sortViolations(out)
	return out
}

// pricesAt are the prices that may have been in force at t for the
// period with key. An immediate interval change in the instant a period of
// the old schedule began (a resume's, say) leaves that period, when it was
// already charged, at the old price: its key lacks the suffix of the
// schedule the change started.
func pricesAt(s Subscription, applied []Change, t time.Time, key string) []int64 {
	price := s.Amount
	if len(applied) > 0 {
		price = applied[0].AmountBefore
	}
	var also []int64
	for _, ch := range applied {
		at := *ch.AppliedAt
		switch {
		case at.Before(t):
			price = ch.AmountAfter
		case at.Equal(t) && ch.RestartSuffix() != "" && !strings.HasSuffix(key, ch.RestartSuffix()):
			also = append(also, ch.AmountAfter)
		case at.Equal(t) && (ch.Effective != "now" || ch.IntervalChanged()):
			price = ch.AmountAfter
		case at.Equal(t):
			also = append(also, ch.AmountAfter)
		}
	}
	return append([]int64{price}, also...)
}

func containsPrice(prices []int64, p int64) bool {
	for _, x := range prices {
		if x == p {
			return true
		}
	}
	return false
}

func describePrices(prices []int64) string {
	parts := make([]string, len(prices))
	for i, p := range prices {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, " or ")
}

// AdjustmentsMatchTheirChanges: an immediate change's adjustment is the
// contract's formula — the difference of the prices times the unused
// share of the period (its whole seconds left over its whole seconds),
// rounded half to even; an interval change credits the old
// price's unused share — charged only when the change asked charge_now
// and the price went up, and otherwise credited or nothing; each charged
// adjustment is exactly one charge of that amount under the change's id,
// and no adjustment charge lacks its change.
func AdjustmentsMatchTheirChanges(d *Data) []Violation {
	var out []Violation
	var moves []ClockMove
	if d.Observed != nil {
		moves = d.Observed.ClockMoves
	}
	for _, s := range d.Subscriptions {
		byChange := map[string][]Charge{}
		for _, c := range s.Charges {
			if c.Adjustment() {
				byChange[c.ChangeID()] = append(byChange[c.ChangeID()], c)
			}
		}
		tl := BuildTimeline(s, observed(d, s.ID), moves)
		known := map[string]bool{}
		for _, ch := range s.Changes {
			known[ch.ID] = true
			v := func(format string, args ...any) {
				out = append(out, viol(AdjustmentsExact, s.ID, "", fmt.Sprintf("change %s (%s, %s, %d→%d, every %d %s→%d %s at %s): ",
					ch.ID, ch.Effective, ch.Proration, ch.AmountBefore, ch.AmountAfter, ch.CountBefore, ch.IntervalBefore,
					ch.CountAfter, ch.IntervalAfter, fmtT(ch.CreatedAt))+fmt.Sprintf(format, args...)))
			}
			adj := byChange[ch.ID]
			switch {
			case ch.Adjustment > 0 && len(adj) != 1:
				v("charged %d now, in %d adjustment charges", ch.Adjustment, len(adj))
			case ch.Adjustment > 0 && adj[0].Amount != ch.Adjustment:
				v("charged %d now, but its adjustment charge is of %d", ch.Adjustment, adj[0].Amount)
			case ch.Adjustment <= 0 && len(adj) > 0:
				v("has %d adjustment charges although it charged nothing", len(adj))
			}
			if ch.Effective != "now" {
				if ch.Adjustment != 0 {
					v("a change at period end adjusted %d", ch.Adjustment)
				}
				continue
			}
			delta, ok := tl.prorated(ch)
			switch {
			case !ok || ch.Proration == "none":
				if ch.Adjustment != 0 {
					v("adjusted %d where the contract adjusts nothing (proration %s, period in use %t)", ch.Adjustment, ch.Proration, ok)
				}
			case delta > 0 && ch.Proration == "charge_now":
				if ch.Adjustment != delta {
					v("charged %d now, the formula gives %d", ch.Adjustment, delta)
				}
			case delta > 0:
				if ch.Adjustment != 0 {
					v("adjusted %d on an upgrade under %s, which charges nothing", ch.Adjustment, ch.Proration)
				}
			default: // a credit: at most the formula's (capped by what was captured)
				if ch.Adjustment > 0 || -ch.Adjustment > -delta {
					v("adjusted %d, the formula credits at most %d", ch.Adjustment, -delta)
				}
			}
		}
		for id, cs := range byChange {
			if !known[id] {
				out = append(out, viol(AdjustmentsExact, s.ID, cs[0].Key, "an adjustment charge of no recorded change"))
			}
		}
	}
	sortViolations(out)
	return out
}

// prorated is the formula's adjustment of an immediate change: more than
// 0 to charge, less than 0 to credit. ok is false when no period was in
// use (before the first anchor).
func (tl *Timeline) prorated(ch Change) (int64, bool) {
	start, end, ok := tl.periodOf(ch)
	if !ok {
		return 0, false
	}
	diff := ch.AmountAfter - ch.AmountBefore
	if ch.IntervalChanged() {
		diff = -ch.AmountBefore // the old period's unused time, credited
	}
	return unusedShare(diff, start, end, ch.CreatedAt), true
}

// periodOf is the period an immediate change prorated: the one in use
// when it applied, on the grid in force then (a resume in the same
// instant of the clock included, the grid the change itself started
// not).
func (tl *Timeline) periodOf(ch Change) (start, end time.Time, ok bool) {
	i, known := tl.gridBefore[ch.ID]
	if !known {
		return tl.periodAround(ch.CreatedAt)
	}
	g := tl.segments[i].grid
	n := g.Index(ch.CreatedAt)
	if n < 0 {
		return time.Time{}, time.Time{}, false
	}
	return g.Start(n), g.Start(n + 1), true
}

// periodAround is the period in use at service time t on the grid in
// force just before t.
func (tl *Timeline) periodAround(t time.Time) (start, end time.Time, ok bool) {
	for i := len(tl.segments) - 1; i >= 0; i-- {
		seg := tl.segments[i]
		if !seg.from.Before(t) && i > 0 {
			continue
		}
		n := seg.grid.Index(t)
		if n < 0 {
			return time.Time{}, time.Time{}, false
		}
		return seg.grid.Start(n), seg.grid.Start(n + 1), true
	}
	return time.Time{}, time.Time{}, false
}

// unusedShare is amount times (end - at) / (end - start), each counted in
// whole seconds (the part of a second dropped), rounded half to even: the
// contract's formula.
func unusedShare(amount int64, start, end, at time.Time) int64 {
	left := int64(end.Sub(at) / time.Second)
	length := int64(end.Sub(start) / time.Second)
	if length <= 0 || left <= 0 {
		return 0
	}
	if left > length {
		left = length
	}
	r := new(big.Rat).SetFrac(big.NewInt(amount), big.NewInt(1))
	r.Mul(r, big.NewRat(left, length))
	return roundHalfEven(r)
}

func roundHalfEven(r *big.Rat) int64 {
	num, den := new(big.Int).Set(r.Num()), new(big.Int).Set(r.Denom())
	neg := num.Sign() < 0
	num.Abs(num)
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	twice := new(big.Int).Mul(m, big.NewInt(2))
	if c := twice.Cmp(den); c > 0 || (c == 0 && q.Bit(0) == 1) {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	return q.Int64()
}

// CreditsNeverBeyondWhatWasCaptured: a change credits at most the unused
// share of what the gateways captured for the period it prorated (its
// charge and that period's adjustment charges) less what earlier changes
// credited against that period; every credit granted is one entry of the
// ledger, and the balance never goes below zero.
func CreditsNeverBeyondWhatWasCaptured(d *Data) []Violation {
	var out []Violation
	l := indexLedger(d.Ledger)
	var moves []ClockMove
	if d.Observed != nil {
		moves = d.Observed.ClockMoves
	}
	for _, s := range d.Subscriptions {
		tl := BuildTimeline(s, observed(d, s.ID), moves)
		granted := map[string]int64{} // change id -> credit granted in the ledger
		for _, cr := range s.Credits {
			if cr.Amount > 0 {
				granted[cr.ChangeID] += cr.Amount
			}
		}
		credited := map[string]int64{} // period key -> credit granted by earlier changes
		changes := append([]Change(nil), s.Changes...)
		sort.SliceStable(changes, func(i, j int) bool { return changes[i].CreatedAt.Before(changes[j].CreatedAt) })
		for _, ch := range changes {
			if ch.Adjustment >= 0 {
				continue
			}
			credit := -ch.Adjustment
			if granted[ch.ID] != credit {
				out = append(out, viol(CreditsWithinCaptured, s.ID, "", fmt.Sprintf(
					"change %s credited %d, the credit ledger grants %d", ch.ID, credit, granted[ch.ID])))
			}
			var captured int64
			prefix := s.ID + ":" + ch.PeriodKey
			for key := range l.byCharge {
				if key == prefix || strings.HasPrefix(key, prefix+adjMark) {
					for _, o := range l.captures(key) {
						captured += o.Amount
					}
				}
			}
			net := captured - credited[ch.PeriodKey]
			limit := int64(0)
			if start, end, ok := tl.periodOf(ch); ok && net > 0 {
				limit = unusedShare(net, start, end, ch.CreatedAt)
			}
			if credit > limit {
				out = append(out, viol(CreditsWithinCaptured, s.ID, prefix, fmt.Sprintf(
					"change %s credited %d, more than the unused share (%d) of what was captured for period %s (%d, less %d credited before)",
					ch.ID, credit, limit, ch.PeriodKey, captured, credited[ch.PeriodKey])))
			}
			credited[ch.PeriodKey] += credit
		}
		balance := int64(0)
		for _, cr := range s.Credits {
			balance += cr.Amount
			if balance < 0 {
				out = append(out, viol(CreditsWithinCaptured, s.ID, "", fmt.Sprintf(
					"the credit balance went to %d at %s (period %s used %d)", balance, fmtT(cr.At), cr.PeriodKey, -cr.Amount)))
				break
			}
		}
	}
	sortViolations(out)
	return out
}
