package proration_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the DST cases must not depend on the host's zoneinfo

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/subscriptions/proration"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// The fraction is measured on the exact instants of the period the
// subscription's schedule gives, in its zone: a month is as long as it
// is, a DST day 23 or 25 hours.
func TestUnusedFractionOfRealPeriods(t *testing.T) {
	t.Parallel()
	berlin, newYork, utc := zone(t, "Europe/Berlin"), zone(t, "America/New_York"), time.UTC
	for _, tc := range []struct {
		name     string
		sched    period.Schedule
		index    int
		at       time.Time
		num, den int64
	}{
		{"month-end: Jan 31 .. Feb 28 is 28 days",
			period.Schedule{Anchor: time.Date(2027, 1, 31, 0, 0, 0, 0, utc), Location: utc, Interval: period.Month, Count: 1}, 0,
			time.Date(2027, 2, 14, 0, 0, 0, 0, utc), 14 * 86400, 28 * 86400},
		{"month-end: Feb 28 .. Mar 31 is 31 days",
			period.Schedule{Anchor: time.Date(2027, 1, 31, 0, 0, 0, 0, utc), Location: utc, Interval: period.Month, Count: 1}, 1,
			time.Date(2027, 3, 30, 0, 0, 0, 0, utc), 86400, 31 * 86400},
		{"leap year: Jan 31 .. Feb 29 2028 is 29 days",
			period.Schedule{Anchor: time.Date(2028, 1, 31, 0, 0, 0, 0, utc), Location: utc, Interval: period.Month, Count: 1}, 0,
			time.Date(2028, 2, 15, 0, 0, 0, 0, utc), 14 * 86400, 29 * 86400},
		{"leap day anchor, a year that has none: Feb 28 .. Feb 29",
			period.Schedule{Anchor: time.Date(2028, 2, 29, 12, 0, 0, 0, utc), Location: utc, Interval: period.Year, Count: 1}, 0,
			time.Date(2029, 2, 28, 12, 0, 0, 0, utc), 0, 365 * 86400},
		{"Berlin spring forward: the day has 23 hours",
			period.Schedule{Anchor: time.Date(2027, 3, 27, 0, 0, 0, 0, berlin), Location: berlin, Interval: period.Day, Count: 1}, 1,
			time.Date(2027, 3, 28, 12, 0, 0, 0, berlin), 12 * 3600, 23 * 3600},
		{"Berlin fall back: the day has 25 hours",
			period.Schedule{Anchor: time.Date(2027, 10, 30, 0, 0, 0, 0, berlin), Location: berlin, Interval: period.Day, Count: 1}, 1,
			time.Date(2027, 10, 31, 12, 0, 0, 0, berlin), 12 * 3600, 25 * 3600},
		{"New York spring forward month: an hour short",
			period.Schedule{Anchor: time.Date(2027, 3, 1, 0, 0, 0, 0, newYork), Location: newYork, Interval: period.Month, Count: 1}, 0,
			time.Date(2027, 3, 1, 0, 0, 0, 0, newYork), 31*86400 - 3600, 31*86400 - 3600},
		{"New York fall back month: an hour long",
			period.Schedule{Anchor: time.Date(2027, 11, 1, 0, 0, 0, 0, newYork), Location: newYork, Interval: period.Month, Count: 1}, 0,
			time.Date(2027, 11, 30, 0, 0, 0, 0, newYork), 86400, 30*86400 + 3600},
		{"a minute old",
			period.Schedule{Anchor: time.Date(2027, 4, 1, 9, 0, 0, 0, utc), Location: utc, Interval: period.Month, Count: 1}, 0,
			time.Date(2027, 4, 1, 9, 1, 0, 0, utc), 30*86400 - 60, 30 * 86400},
		{"a minute left",
			period.Schedule{Anchor: time.Date(2027, 4, 1, 9, 0, 0, 0, utc), Location: utc, Interval: period.Month, Count: 1}, 0,
			time.Date(2027, 5, 1, 8, 59, 0, 0, utc), 60, 30 * 86400},
		{"part of a second is dropped",
			period.Schedule{Anchor: time.Date(2027, 4, 1, 9, 0, 0, 0, utc), Location: utc, Interval: period.Day, Count: 1}, 0,
			time.Date(2027, 4, 2, 8, 59, 59, 500_000_000, utc), 0, 86400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.sched.Period(tc.index)
			require.Equal(t, proration.Fraction{Num: tc.num, Den: tc.den}, proration.Unused(p.Start, p.End, tc.at))
		})
	}
}

func TestUnusedOutsideThePeriod(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(100 * time.Second)
	require.Equal(t, proration.Fraction{Num: 100, Den: 100}, proration.Unused(start, end, start.Add(-time.Hour)))
	require.Equal(t, proration.Fraction{Num: 0, Den: 100}, proration.Unused(start, end, end.Add(time.Hour)))
	require.Equal(t, proration.Fraction{Num: 0, Den: 1}, proration.Unused(start, start, start), "an empty period has nothing left")
}

func TestDeltaRoundsHalfToEven(t *testing.T) {
	t.Parallel()
	half := proration.Fraction{Num: 1, Den: 2}
	for _, tc := range []struct {
		old, new int64
		f        proration.Fraction
		want     int64
	}{
		{1000, 2000, half, 500},
		{1000, 1001, half, 0},                                   // 0.5 -> 0
		{1000, 1003, half, 2},                                   // 1.5 -> 2
		{1000, 1005, half, 2},                                   // 2.5 -> 2
		{1000, 999, half, 0},                                    // -0.5 -> 0
		{1000, 997, half, -2},                                   // -1.5 -> -2
		{1000, 995, half, -2},                                   // -2.5 -> -2
		{1000, 1001, proration.Fraction{Num: 2, Den: 3}, 1},     // 0.667 -> 1
		{1000, 1001, proration.Fraction{Num: 1, Den: 3}, 0},     // 0.333 -> 0
		{1000, 0, proration.Fraction{Num: 60, Den: 2592000}, 0}, // a minute left of 30 days: 0.023
		{2592000, 0, proration.Fraction{Num: 60, Den: 2592000}, -60},
		{999_999_999_999, 1, proration.Fraction{Num: 2591999, Den: 2592000}, -999_999_614_196}, // no overflow: -999999614195.53
	} {
		require.Equal(t, tc.want, proration.Delta(tc.old, tc.new, tc.f), "%d -> %d over %d/%d", tc.old, tc.new, tc.f.Num, tc.f.Den)
	}
}

// The worked example of the decision: a 30-day month of 3000, upgraded
// to 4500 with 10 days 6 hours left.
func TestWorkedExample(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)
	end := time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)
	f := proration.Unused(start, end, end.Add(-(10*24+6)*time.Hour))
	require.Equal(t, proration.Fraction{Num: 885600, Den: 2592000}, f)
	require.Equal(t, int64(512), proration.Delta(3000, 4500, f), "1500 * 885600 / 2592000 = 512.5, a tie: to the even 512")
	require.Equal(t, int64(-512), proration.Delta(4500, 3000, f), "the downgrade is the mirror image")
}

func TestCreditCap(t *testing.T) {
	t.Parallel()
	half := proration.Fraction{Num: 1, Den: 2}
	require.Equal(t, int64(500), proration.CreditCap(1000, 0, half))
	require.Equal(t, int64(250), proration.CreditCap(1000, 500, half), "net of the credit already granted")
	require.Zero(t, proration.CreditCap(0, 0, half), "nothing captured, nothing to give back")
	require.Zero(t, proration.CreditCap(100, 500, half), "never below zero")
}
