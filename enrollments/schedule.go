package enrollments

import (
	"time"

	"github.com/rebill/rebill/charges/registry"
)

// Moscow is the zone of bill dates: due dates, discount deadlines and pay
// days are days in Europe/Moscow.
var Moscow = mustLoad("Europe/Moscow")

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic("enrollments: " + err.Error()) // time/tzdata is embedded: cannot happen
	}
	return loc
}

// Date is a calendar day in Europe/Moscow, held as midnight UTC of that
// day (how PostgreSQL's date reads back).
type Date struct{ t time.Time }

// ParseDate reads YYYY-MM-DD.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, err
	}
	return Date{t: t}, nil
}

// DateOf is the Moscow day of t.
func DateOf(t time.Time) Date {
	y, m, d := t.In(Moscow).Date()
	return Date{t: time.Date(y, m, d, 0, 0, 0, 0, time.UTC)}
}

// NewDate wraps a date value read from the database (midnight UTC).
func NewDate(t time.Time) Date {
	y, m, d := t.Date()
	return Date{t: time.Date(y, m, d, 0, 0, 0, 0, time.UTC)}
}

// IsZero reports whether d is unset.
func (d Date) IsZero() bool { return d.t.IsZero() }

// String is YYYY-MM-DD.
func (d Date) String() string { return d.t.Format(time.DateOnly) }

// Time is d as midnight UTC, for the database's date columns.
func (d Date) Time() time.Time { return d.t }

// Before reports whether d is an earlier day than e.
func (d Date) Before(e Date) bool { return d.t.Before(e.t) }

// AddDays is the day n days after d.
func (d Date) AddDays(n int) Date { return Date{t: d.t.AddDate(0, 0, n)} }

// Start is the first instant of d in Moscow.
func (d Date) Start() time.Time {
	y, m, day := d.t.Date()
	return time.Date(y, m, day, 0, 0, 0, 0, Moscow).UTC()
}

// End is the first instant after d in Moscow: the deadline "by the end of
// that day".
func (d Date) End() time.Time { return d.AddDays(1).Start() }

// FineExpiryDays is how long after the ruling a fine may still be paid
// (KoAP 32.2 part 1: 60 days after it enters into force); after it, the
// payment is late and autopay leaves the fine to its payer.
const FineExpiryDays = 60

// Rules are the scheduling rules of bills, besides the dates each bill
// carries.
type Rules struct {
	// Dunning is the dunning schedule: offsets of the retries from the
	// first decline. Its span (the last offset) is the dunning room.
	Dunning []time.Duration
	// CaptureMargin is how long before a discount deadline a discounted
	// attempt must start for its hold, posting and capture to finish
	// before the deadline; a retry that would start later is made after
	// it, at the full amount.
	CaptureMargin time.Duration
}

// Room is the dunning room: the span of the dunning schedule.
func (r Rules) Room() time.Duration {
	if len(r.Dunning) == 0 {
		return 0
	}
	return r.Dunning[len(r.Dunning)-1]
}

// Plan is when and what a bill is charged.
type Plan struct {
	// PayAt is when the bill is charged.
	PayAt time.Time
	// ExpiresAt ends the last day on which the bill may be paid.
	ExpiresAt time.Time
	// DiscountEnds is the end of the discount deadline's day; nil
	// without a discount.
	DiscountEnds *time.Time
}

// LastStart is the last moment an attempt of a bill that may be paid
// until expires may start: CaptureMargin before it, so that its hold,
// posting and capture finish in time. A bill that arrives at or after it
// is expired on arrival.
func (r Rules) LastStart(expires time.Time) time.Time { return expires.Add(-r.CaptureMargin) }

// PlanBill decides when a bill that arrived at arrival is charged, for an
// enrollment of kind paying on payDay (0: on arrival):
//   - fines are paid on arrival, so that dunning fits before the
//     discount deadline; they may be paid until the later of their due
//     date and FineExpiryDays after the ruling (issued_at);
//   - housing bills are paid at the start of the first pay day (Moscow)
//     on or after arrival, or on arrival without a pay day, and never
//     later than the due date's end minus the dunning room (or the
//     arrival, if later): a pay day closer than that to the due date is
//     replaced by that moment, so that the whole dunning fits before the
//     due date. They may be paid until the end of their due date.
func (r Rules) PlanBill(kind Kind, payDay int, b BillInput, arrival time.Time) Plan {
	p := Plan{PayAt: arrival, ExpiresAt: b.DueDate.End()}
	if kind == Fines {
		if late := DateOf(b.IssuedAt).AddDays(FineExpiryDays).End(); late.After(p.ExpiresAt) {
			p.ExpiresAt = late
		}
		if b.DiscountDeadline != nil {
			end := b.DiscountDeadline.End()
			p.DiscountEnds = &end
		}
		return p
	}
	if payDay == 0 {
		return p
	}
	day := DateOf(arrival)
	for i := 0; i < 31; i++ {
		if day.t.Day() == payDay {
			break
		}
		day = day.AddDays(1)
	}
	payAt := day.Start()
	if payAt.Before(arrival) {
		payAt = arrival
	}
	if latest := p.ExpiresAt.Add(-r.Room()); payAt.After(latest) {
		payAt = latest
		if payAt.Before(arrival) {
			payAt = arrival
		}
	}
	p.PayAt = payAt
	return p
}

// AmountDue is what the bill costs if its attempt starts at t: the
// discounted amount before its last discounted start, the full amount
// after. The last discounted start is registry.DiscountMargin before
// the end of the discount deadline: a hold placed later could not be
// posted to the registry and captured while the discount holds, so the
// attempt is priced in full (charges prices it the same way).
func AmountDue(amount int64, discounted *int64, discountEnds *time.Time, t time.Time) int64 {
	if discounted != nil && discountEnds != nil && t.Before(discountEnds.Add(-registry.DiscountMargin)) {
		return *discounted
	}
	return amount
}

// NextAttempt is a bill's dunning: when the attempt that was just
// declined (attempt, the charge's attempt count; attemptTimes, when each
// attempt started; first, its first decline) is followed by another, or ok
// false when the bill's dunning is over.
//
// Before a discount deadline the schedule is compressed so that its last
// retry starts CaptureMargin before the deadline; once it is exhausted,
// the next attempt is made at the deadline, at the full amount, and the
// schedule starts again from there. No attempt starts after the bill's
// last payable day (expires) minus CaptureMargin.
func (r Rules) NextAttempt(attempt int, attemptTimes []time.Time, first time.Time, discountEnds *time.Time, expires time.Time) (time.Time, bool) {
	latest := expires.Add(-r.CaptureMargin)
	check := func(at time.Time) (time.Time, bool) {
		if !at.Before(latest) {
			return time.Time{}, false
		}
		return at, true
	}
	if discountEnds != nil && first.Before(*discountEnds) {
		discounted := 0 // attempts that started at the discounted price
		for _, at := range attemptTimes {
			if at.Before(discountEnds.Add(-registry.DiscountMargin)) {
				discounted++
			}
		}
		if discounted == attempt { // the declined attempt was a discounted one
			room := discountEnds.Add(-r.CaptureMargin).Sub(first)
			if attempt <= len(r.Dunning) && room > 0 {
				offset := r.Dunning[attempt-1]
				if span := r.Room(); span > room {
					offset = time.Duration(float64(offset) * float64(room) / float64(span))
				}
				return check(first.Add(offset))
			}
			return check(*discountEnds)
		}
		full := attempt - discounted
		if full > len(r.Dunning) {
			return time.Time{}, false
		}
		return check(discountEnds.Add(r.Dunning[full-1]))
	}
	if attempt < 1 || attempt > len(r.Dunning) {
		return time.Time{}, false
	}
	return check(first.Add(r.Dunning[attempt-1]))
}
