// Package period computes billing periods for subscriptions.
//
// It is pure calendar arithmetic with no I/O, so renewals, the charge
// pipeline and reports all agree on exactly when period n starts and which
// key identifies it.
//
// Every period start is computed directly from the anchor as the anchor's
// local wall-clock date-time plus n*Count intervals. Deriving a start from
// the previous period instead would let month-end clamping accumulate (a
// subscription anchored on Jan 31 would drift to the 28th after February)
// and would make a period's start depend on how many periods were computed
// before it.
package period

import (
	"errors"
	"fmt"
	"time"
)

// Interval is the calendar unit a subscription bills in.
type Interval string

// The supported intervals. Their string values are the ones stored and
// accepted by the API, so they must not change.
const (
	Day     Interval = "day"
	Week    Interval = "week"
	Month   Interval = "month"
	Quarter Interval = "quarter"
	Year    Interval = "year"
)

// ErrInvalidInterval is wrapped by errors for interval names that are not
// one of the supported intervals, so callers can map them to a validation
// error with errors.Is.
var ErrInvalidInterval = errors.New("invalid billing interval")

// span is the calendar length of an interval. Exactly one field is
// non-zero: day-based intervals add local calendar days (so the local
// billing time survives DST changes), month-based ones add months with
// end-of-month clamping.
type span struct{ days, months int }

// spans is the single source of truth for which intervals exist.
var spans = map[Interval]span{
	Day:     {days: 1},
	Week:    {days: 7},
	Month:   {months: 1},
	Quarter: {months: 3},
	Year:    {months: 12},
}

// keyLayout formats a period key: the start date in the subscription's zone.
const keyLayout = "2006-01-02"

// ParseInterval converts an exact, lower-case interval name into an
// Interval. Any other input returns an error wrapping ErrInvalidInterval;
// it is deliberately strict so that a stored value round-trips unchanged.
func ParseInterval(s string) (Interval, error) {
	if _, ok := spans[Interval(s)]; !ok {
		return "", fmt.Errorf("%w: %q", ErrInvalidInterval, s)
	}
	return Interval(s), nil
}

// Schedule describes when a subscription's billing periods start.
type Schedule struct {
	// Anchor is the start of period 0.
	Anchor time.Time
	// Location is the subscription's IANA time zone. Period starts keep the
	// anchor's local wall-clock time in this zone, and period keys are
	// dates in it.
	Location *time.Location
	// Interval is the calendar unit of one period.
	Interval Interval
	// Count is the number of Intervals per period; it must be at least 1.
	Count int
	// KeySuffix is appended to every period key. A schedule restarted on a
	// day that began a paid period (an interval change) would otherwise
	// give its first period that paid period's key, and leave it uncharged.
	KeySuffix string
}

// Period is one billing period. It covers [Start, End).
type Period struct {
	Index int
	// Key is the start date in the subscription's zone, formatted
	// "2006-01-02", followed by the schedule's KeySuffix. It is stable for a given schedule and index, so it can
	// serve as an idempotency key for charging the period.
	Key string
	// Start and End are in UTC; End is the next period's Start.
	Start, End time.Time
}

// Validate reports whether the schedule can be used. The other methods
// panic on a schedule that fails Validate, because period math on it has no
// meaning; validate schedules built from external input first.
func (s Schedule) Validate() error {
	if _, err := ParseInterval(string(s.Interval)); err != nil {
		return err
	}
	if s.Count < 1 {
		return fmt.Errorf("interval count %d must be at least 1", s.Count)
	}
	if s.Location == nil {
		return errors.New("schedule has no location")
	}
	return nil
}

// Period returns period n.
func (s Schedule) Period(n int) Period {
	start := s.Start(n)
	return Period{
		Index: n,
		Key:   start.In(s.Location).Format(keyLayout) + s.KeySuffix,
		Start: start,
		End:   s.Start(n + 1),
	}
}

// Start returns the start of period n in UTC: the anchor's local date-time
// in s.Location plus n*Count intervals.
//
// Month-based intervals clamp the day to the last day of the target month
// (Jan 31 + 1 month is Feb 28, or Feb 29 in a leap year) and keep the local
// time of day.
//
// When that local time does not exist on the target day (a DST
// spring-forward gap) or exists twice (fall-back), the instant is whatever
// time.Date normalises it to. Go only guarantees the result is correct in
// one of the two zone offsets around the transition, so it may be an hour
// later or earlier than the wall clock suggests; e.g. 02:30 becomes 03:30
// CEST in Europe/Berlin but 01:30 EST in America/New_York. Across ordinary
// DST transitions starts still strictly increase, which is all billing
// relies on.
//
// Start(0) is the anchor itself, even if its wall-clock time is ambiguous,
// so that no instant at or after the anchor lies before period 0.
func (s Schedule) Start(n int) time.Time {
	step := s.step()
	if n == 0 {
		return s.Anchor.UTC()
	}
	local := s.Anchor.In(s.Location)
	if step.months == 0 {
		// AddDate on a local time adds calendar days, keeping the local time
		// of day across DST changes.
		return local.AddDate(0, 0, n*step.days).UTC()
	}
	return addMonthsClamped(local, n*step.months).UTC()
}

// IndexAt returns the index of the period containing t, i.e. the largest n
// with Start(n) <= t, or -1 if t is before the anchor.
//
// It runs in constant time however far t is from the anchor: it estimates n
// from the number of calendar days or months between the local dates, which
// is off by at most about one period, and then corrects the estimate against
// Start.
func (s Schedule) IndexAt(t time.Time) int {
	step := s.step()
	if t.Before(s.Anchor) {
		return -1
	}
	n := max(s.estimate(t, step), 0)
	for n > 0 && s.Start(n).After(t) {
		n--
	}
	for !s.Start(n + 1).After(t) {
		n++
	}
	return n
}

// Due returns the indexes from from onwards whose period has started by now,
// oldest first and at most limit of them, so a caller catching up after
// downtime bills a bounded batch per run. A negative from is treated as 0,
// the first period. It returns nil if nothing is due or limit <= 0.
func (s Schedule) Due(from int, now time.Time, limit int) []int {
	from = max(from, 0)
	last := s.IndexAt(now)
	if limit <= 0 || from > last {
		return nil
	}
	due := make([]int, min(last-from+1, limit))
	for i := range due {
		due[i] = from + i
	}
	return due
}

// step returns the calendar length of one period. It panics if the schedule
// is invalid (see Validate).
func (s Schedule) step() span {
	if err := s.Validate(); err != nil {
		panic(fmt.Sprintf("period: invalid schedule: %v", err))
	}
	unit := spans[s.Interval]
	return span{days: unit.days * s.Count, months: unit.months * s.Count}
}

// estimate approximates IndexAt(t) from the whole calendar days or months
// between the local dates of the anchor and t.
func (s Schedule) estimate(t time.Time, step span) int {
	from, to := s.Anchor.In(s.Location), t.In(s.Location)
	if step.months == 0 {
		return (civilDay(to) - civilDay(from)) / step.days
	}
	fromYear, fromMonth, _ := from.Date()
	toYear, toMonth, _ := to.Date()
	return ((toYear-fromYear)*12 + int(toMonth-fromMonth)) / step.months
}

// civilDay numbers t's calendar date (in t's own location) as days since
// 1970-01-01, so that subtracting two of them counts calendar days
// regardless of DST.
func civilDay(t time.Time) int {
	year, month, day := t.Date()
	return int(time.Date(year, month, day, 0, 0, 0, 0, time.UTC).Unix() / (24 * 60 * 60))
}

// addMonthsClamped adds months to t's local date, clamping the day to the
// target month's length, and keeps t's local time of day. time.AddDate
// cannot be used because it overflows instead (Jan 31 + 1 month = Mar 3).
func addMonthsClamped(t time.Time, months int) time.Time {
	year, month, day := t.Date()
	// Day 0 of the following month normalises to the target month's last day.
	lastDay := time.Date(year, month+time.Month(months)+1, 0, 0, 0, 0, 0, time.UTC)
	hour, minute, second := t.Clock()
	return time.Date(lastDay.Year(), lastDay.Month(), min(day, lastDay.Day()),
		hour, minute, second, t.Nanosecond(), t.Location())
}
