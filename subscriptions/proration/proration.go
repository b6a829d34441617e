// Package proration computes what an immediate change of a subscription's
// price owes or gives back for the unused part of the current period. It
// is pure integer arithmetic on exact instants, with no I/O, so that the
// service, the soak's invariants and a person checking a charge by hand
// arrive at the same minor unit.
package proration

import (
	"math/big"
	"time"
)

// Fraction is the unused part of a period: Num seconds left of Den.
type Fraction struct {
	Num, Den int64
}

// Unused is the fraction of the period [start, end) left at the change
// at: whole seconds from at to end over whole seconds from start to end
// (the part of a second is dropped from each; the instants are exact, so
// a period across a DST change is as long as it really is). at before
// start counts the whole period, at or after end none of it.
func Unused(start, end, at time.Time) Fraction {
	den := int64(end.Sub(start) / time.Second)
	if den <= 0 {
		return Fraction{Num: 0, Den: 1}
	}
	num := min(max(int64(end.Sub(at)/time.Second), 0), den)
	return Fraction{Num: num, Den: den}
}

// Of is amount times f, rounded half to even to a whole minor unit.
func (f Fraction) Of(amount int64) int64 {
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(amount), big.NewInt(f.Num)), big.NewInt(f.Den))
	return roundHalfEven(r)
}

// Delta is the difference between the new and the old price over the
// unused fraction f, rounded half to even: positive for an upgrade (owed),
// negative for a downgrade (given back).
func Delta(oldAmount, newAmount int64, f Fraction) int64 {
	return f.Of(newAmount - oldAmount)
}

// CreditCap is the most a credit may give back: the unused fraction f of
// what was captured for the period, net of the credits already granted
// against it (never below zero). Money never paid is never credited.
func CreditCap(captured, granted int64, f Fraction) int64 {
	return max(f.Of(captured-granted), 0)
}

// roundHalfEven rounds r to the nearest integer, a tie to the even one.
func roundHalfEven(r *big.Rat) int64 {
	num, den := r.Num(), r.Denom()                      // den > 0
	q, m := new(big.Int).QuoRem(num, den, new(big.Int)) // truncated toward zero
	twice := new(big.Int).Abs(m)
	twice.Lsh(twice, 1)
	switch c := twice.Cmp(den); {
	case c > 0 || (c == 0 && q.Bit(0) == 1):
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q.Int64()
}
