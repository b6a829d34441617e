package experiments

import "time"

// NextRetry is when the retry after attempt (from 1: the attempt just
// declined) of a charge first declined at first runs under the dunning arm
// p, moved to p.Hour in loc when set; ok is false when the arm's schedule
// is exhausted.
func (p Params) NextRetry(first time.Time, attempt int, loc *time.Location) (at time.Time, ok bool) {
	if attempt < 1 || attempt > len(p.Dunning) {
		return time.Time{}, false
	}
	at = first.Add(p.Dunning[attempt-1])
	if p.Hour == nil {
		return at, true
	}
	return AtHour(at, *p.Hour, loc), true
}

// AtHour is the first whole hour hour (local to loc) at or after t. Days
// are counted on the calendar, so a daylight-saving change moves the
// instant, not the local hour; an hour the change skips becomes the one
// after it.
func AtHour(t time.Time, hour int, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	for day := 0; ; day++ {
		at := time.Date(local.Year(), local.Month(), local.Day()+day, hour, 0, 0, 0, loc)
		if !at.Before(t) {
			return at
		}
	}
}
