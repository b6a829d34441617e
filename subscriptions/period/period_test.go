package period_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the DST and zone-key cases must not depend on the host's zoneinfo

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/subscriptions/period"
)

func loadLocation(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// at parses an RFC 3339 instant; writing expectations with the local offset
// keeps the intended wall-clock time readable.
func at(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

func TestParseInterval(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"day", "week", "month", "quarter", "year"} {
		got, err := period.ParseInterval(s)
		require.NoError(t, err)
		require.Equal(t, period.Interval(s), got)
	}
	for _, s := range []string{"", "Month", "months", " day", "fortnight"} {
		_, err := period.ParseInterval(s)
		require.ErrorIs(t, err, period.ErrInvalidInterval, "input %q", s)
	}
}

func TestScheduleValidate(t *testing.T) {
	t.Parallel()
	valid := period.Schedule{Anchor: at(t, "2026-01-01T00:00:00Z"), Location: time.UTC, Interval: period.Month, Count: 1}
	require.NoError(t, valid.Validate())

	badInterval := valid
	badInterval.Interval = "fortnight"
	require.ErrorIs(t, badInterval.Validate(), period.ErrInvalidInterval)

	zeroCount := valid
	zeroCount.Count = 0
	require.Error(t, zeroCount.Validate())
	require.Panics(t, func() { zeroCount.Start(1) })

	noLocation := valid
	noLocation.Location = nil
	require.Error(t, noLocation.Validate())
}

func TestScheduleStart(t *testing.T) {
	t.Parallel()
	berlin := loadLocation(t, "Europe/Berlin")
	newYork := loadLocation(t, "America/New_York")

	tests := []struct {
		name     string
		anchor   string
		loc      *time.Location
		interval period.Interval
		count    int
		// want maps a period index to its expected start.
		want map[int]string
	}{
		{
			name: "month clamps to month end without drifting", anchor: "2027-01-31T10:00:00Z",
			loc: time.UTC, interval: period.Month, count: 1,
			want: map[int]string{
				0:  "2027-01-31T10:00:00Z",
				1:  "2027-02-28T10:00:00Z",
				2:  "2027-03-31T10:00:00Z",
				3:  "2027-04-30T10:00:00Z",
				4:  "2027-05-31T10:00:00Z",
				13: "2028-02-29T10:00:00Z",
			},
		},
		{
			name: "month keeps local time across DST", anchor: "2026-01-31T09:30:00+01:00",
			loc: berlin, interval: period.Month, count: 1,
			want: map[int]string{
				1: "2026-02-28T09:30:00+01:00",
				2: "2026-03-31T09:30:00+02:00",
				9: "2026-10-31T09:30:00+01:00",
			},
		},
		{
			name: "every 2 months", anchor: "2027-08-31T00:00:00Z",
			loc: time.UTC, interval: period.Month, count: 2,
			want: map[int]string{
				1: "2027-10-31T00:00:00Z",
				2: "2027-12-31T00:00:00Z",
				3: "2028-02-29T00:00:00Z",
				4: "2028-04-30T00:00:00Z",
				5: "2028-06-30T00:00:00Z",
				6: "2028-08-31T00:00:00Z",
			},
		},
		{
			name: "every 3 months", anchor: "2027-11-30T12:00:00Z",
			loc: time.UTC, interval: period.Month, count: 3,
			want: map[int]string{
				1: "2028-02-29T12:00:00Z",
				2: "2028-05-30T12:00:00Z",
				3: "2028-08-30T12:00:00Z",
			},
		},
		{
			name: "quarter", anchor: "2027-05-31T00:00:00Z",
			loc: time.UTC, interval: period.Quarter, count: 1,
			want: map[int]string{
				1: "2027-08-31T00:00:00Z",
				2: "2027-11-30T00:00:00Z",
				3: "2028-02-29T00:00:00Z",
				4: "2028-05-31T00:00:00Z",
			},
		},
		{
			name: "every 2 quarters", anchor: "2027-08-31T00:00:00Z",
			loc: time.UTC, interval: period.Quarter, count: 2,
			want: map[int]string{
				1: "2028-02-29T00:00:00Z",
				2: "2028-08-31T00:00:00Z",
			},
		},
		{
			name: "year anchored on Feb 29", anchor: "2028-02-29T08:00:00Z",
			loc: time.UTC, interval: period.Year, count: 1,
			want: map[int]string{
				1: "2029-02-28T08:00:00Z",
				2: "2030-02-28T08:00:00Z",
				3: "2031-02-28T08:00:00Z",
				4: "2032-02-29T08:00:00Z",
			},
		},
		{
			name: "every 3 years anchored on Feb 29", anchor: "2028-02-29T08:00:00Z",
			loc: time.UTC, interval: period.Year, count: 3,
			want: map[int]string{
				1: "2031-02-28T08:00:00Z",
				4: "2040-02-29T08:00:00Z",
			},
		},
		{
			name: "week", anchor: "2027-12-29T10:00:00Z",
			loc: time.UTC, interval: period.Week, count: 1,
			want: map[int]string{
				1: "2028-01-05T10:00:00Z",
				9: "2028-03-01T10:00:00Z",
			},
		},
		{
			name: "every 2 weeks", anchor: "2027-12-29T10:00:00Z",
			loc: time.UTC, interval: period.Week, count: 2,
			want: map[int]string{
				1: "2028-01-12T10:00:00Z",
				3: "2028-02-09T10:00:00Z",
			},
		},
		{
			name: "week keeps local time across DST", anchor: "2026-03-25T09:00:00+01:00",
			loc: berlin, interval: period.Week, count: 1,
			want: map[int]string{1: "2026-04-01T09:00:00+02:00"},
		},
		{
			name: "day through leap day", anchor: "2028-02-27T10:00:00Z",
			loc: time.UTC, interval: period.Day, count: 1,
			want: map[int]string{
				2: "2028-02-29T10:00:00Z",
				3: "2028-03-01T10:00:00Z",
			},
		},
		{
			name: "every 3 days", anchor: "2028-02-27T10:00:00Z",
			loc: time.UTC, interval: period.Day, count: 3,
			want: map[int]string{
				1: "2028-03-01T10:00:00Z",
				2: "2028-03-04T10:00:00Z",
			},
		},
		{
			name: "daily 09:00 Berlin spring forward", anchor: "2026-03-28T09:00:00+01:00",
			loc: berlin, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-03-29T09:00:00+02:00",
				2: "2026-03-30T09:00:00+02:00",
			},
		},
		{
			name: "daily 09:00 Berlin fall back", anchor: "2026-10-24T09:00:00+02:00",
			loc: berlin, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-10-25T09:00:00+01:00",
				2: "2026-10-26T09:00:00+01:00",
			},
		},
		{
			name: "daily 09:00 New York spring forward", anchor: "2026-03-07T09:00:00-05:00",
			loc: newYork, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-03-08T09:00:00-04:00",
				2: "2026-03-09T09:00:00-04:00",
			},
		},
		{
			name: "daily 09:00 New York fall back", anchor: "2026-10-31T09:00:00-04:00",
			loc: newYork, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-11-01T09:00:00-05:00",
				2: "2026-11-02T09:00:00-05:00",
			},
		},
		{
			// 02:30 does not exist on 2026-03-29 in Berlin; time.Date resolves
			// it with the pre-transition offset, giving 03:30 CEST.
			name: "daily 02:30 Berlin in the spring gap", anchor: "2026-03-28T02:30:00+01:00",
			loc: berlin, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-03-29T03:30:00+02:00",
				2: "2026-03-30T02:30:00+02:00",
			},
		},
		{
			// 02:30 happens twice on 2026-10-25 in Berlin; time.Date picks
			// the second (CET) occurrence here.
			name: "daily 02:30 Berlin in the repeated hour", anchor: "2026-10-24T02:30:00+02:00",
			loc: berlin, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-10-25T02:30:00+01:00",
				2: "2026-10-26T02:30:00+01:00",
			},
		},
		{
			// 02:30 does not exist on 2026-03-08 in New York; time.Date
			// resolves it with the post-transition offset, giving 01:30 EST.
			name: "daily 02:30 New York in the spring gap", anchor: "2026-03-07T02:30:00-05:00",
			loc: newYork, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-03-08T01:30:00-05:00",
				2: "2026-03-09T02:30:00-04:00",
			},
		},
		{
			name: "daily 02:30 New York fall back", anchor: "2026-10-31T02:30:00-04:00",
			loc: newYork, interval: period.Day, count: 1,
			want: map[int]string{
				1: "2026-11-01T02:30:00-05:00",
				2: "2026-11-02T02:30:00-05:00",
			},
		},
		{
			// The anchor is the second 01:30; period 0 must still start at
			// the anchor, not at the first 01:30 time.Date would choose.
			name: "anchor in the repeated hour", anchor: "2026-11-01T01:30:00-05:00",
			loc: newYork, interval: period.Day, count: 1,
			want: map[int]string{
				0: "2026-11-01T01:30:00-05:00",
				1: "2026-11-02T01:30:00-05:00",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := period.Schedule{Anchor: at(t, tt.anchor), Location: tt.loc, Interval: tt.interval, Count: tt.count}
			for n, want := range tt.want {
				got := s.Start(n)
				require.Equal(t, at(t, want).UTC(), got, "Start(%d)", n)
				require.Equal(t, n, s.IndexAt(got), "IndexAt(Start(%d))", n)
			}
		})
	}
}

func TestSchedulePeriod(t *testing.T) {
	t.Parallel()
	berlin := loadLocation(t, "Europe/Berlin")
	moscow := loadLocation(t, "Europe/Moscow")

	tests := []struct {
		name               string
		schedule           period.Schedule
		n                  int
		wantKey            string
		wantStart, wantEnd string
		wantLength         time.Duration
	}{
		{
			name:     "Moscow key is the local date, not the UTC date",
			schedule: period.Schedule{Anchor: at(t, "2026-12-01T00:00:00+03:00"), Location: moscow, Interval: period.Month, Count: 1},
			n:        0, wantKey: "2026-12-01",
			wantStart: "2026-11-30T21:00:00Z", wantEnd: "2026-12-31T21:00:00Z",
			wantLength: 31 * 24 * time.Hour,
		},
		{
			name:     "Moscow next period",
			schedule: period.Schedule{Anchor: at(t, "2026-12-01T00:00:00+03:00"), Location: moscow, Interval: period.Month, Count: 1},
			n:        1, wantKey: "2027-01-01",
			wantStart: "2026-12-31T21:00:00Z", wantEnd: "2027-01-31T21:00:00Z",
			wantLength: 31 * 24 * time.Hour,
		},
		{
			name:     "period containing spring forward is 23 hours",
			schedule: period.Schedule{Anchor: at(t, "2026-03-28T09:00:00+01:00"), Location: berlin, Interval: period.Day, Count: 1},
			n:        0, wantKey: "2026-03-28",
			wantStart: "2026-03-28T08:00:00Z", wantEnd: "2026-03-29T07:00:00Z",
			wantLength: 23 * time.Hour,
		},
		{
			name:     "period containing fall back is 25 hours",
			schedule: period.Schedule{Anchor: at(t, "2026-10-24T09:00:00+02:00"), Location: berlin, Interval: period.Day, Count: 1},
			n:        0, wantKey: "2026-10-24",
			wantStart: "2026-10-24T07:00:00Z", wantEnd: "2026-10-25T08:00:00Z",
			wantLength: 25 * time.Hour,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.schedule.Period(tt.n)
			require.Equal(t, period.Period{
				Index: tt.n,
				Key:   tt.wantKey,
				Start: at(t, tt.wantStart).UTC(),
				End:   at(t, tt.wantEnd).UTC(),
			}, got)
			require.Equal(t, tt.schedule.Start(tt.n+1), got.End, "End is the next period's Start")
			require.Equal(t, tt.wantLength, got.End.Sub(got.Start))
		})
	}
}

func TestScheduleIndexAt(t *testing.T) {
	t.Parallel()
	berlin := loadLocation(t, "Europe/Berlin")
	daily := period.Schedule{Anchor: at(t, "2026-01-01T09:00:00+01:00"), Location: berlin, Interval: period.Day, Count: 1}
	monthly := period.Schedule{Anchor: at(t, "2027-01-31T10:00:00Z"), Location: time.UTC, Interval: period.Month, Count: 1}

	tests := []struct {
		name     string
		schedule period.Schedule
		t        string
		want     int
	}{
		{name: "at the anchor", schedule: daily, t: "2026-01-01T09:00:00+01:00", want: 0},
		{name: "just before the anchor", schedule: daily, t: "2026-01-01T08:59:59.999999999+01:00", want: -1},
		{name: "long before the anchor", schedule: daily, t: "1990-06-01T00:00:00Z", want: -1},
		{name: "exactly at a boundary", schedule: daily, t: "2026-01-06T09:00:00+01:00", want: 5},
		{name: "just before a boundary", schedule: daily, t: "2026-01-06T08:59:59.999999999+01:00", want: 4},
		{name: "boundary after spring forward", schedule: daily, t: "2026-03-29T09:00:00+02:00", want: 87},
		{name: "just before boundary after spring forward", schedule: daily, t: "2026-03-29T08:59:59+02:00", want: 86},
		// 2026-01-01 to 2076-01-01 is 50*365 days plus 12 leap days (2028..2072).
		{name: "50 years later at a boundary", schedule: daily, t: "2076-01-01T09:00:00+01:00", want: 18262},
		{name: "50 years later just before a boundary", schedule: daily, t: "2076-01-01T08:59:59.999999999+01:00", want: 18261},
		{name: "50 years later in summer time", schedule: daily, t: "2076-07-01T09:00:00+02:00", want: 18444},
		{name: "month-end boundary", schedule: monthly, t: "2028-02-29T10:00:00Z", want: 13},
		{name: "just before month-end boundary", schedule: monthly, t: "2028-02-29T09:59:59Z", want: 12},
		{name: "clamped day does not end the period early", schedule: monthly, t: "2027-03-30T12:00:00Z", want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := at(t, tt.t)
			got := tt.schedule.IndexAt(ts)
			require.Equal(t, tt.want, got)
			if got >= 0 {
				require.False(t, tt.schedule.Start(got).After(ts), "Start(%d) must be <= t", got)
			}
			require.True(t, tt.schedule.Start(got+1).After(ts), "Start(%d) must be > t", got+1)
		})
	}
}

func TestScheduleDue(t *testing.T) {
	t.Parallel()
	s := period.Schedule{Anchor: at(t, "2026-01-01T09:00:00Z"), Location: time.UTC, Interval: period.Day, Count: 1}
	now := at(t, "2026-01-11T10:00:00Z") // period 10 has started, 11 has not

	tests := []struct {
		name  string
		from  int
		now   time.Time
		limit int
		want  []int
	}{
		{name: "limited batch, oldest first", from: 3, now: now, limit: 5, want: []int{3, 4, 5, 6, 7}},
		{name: "fewer due than the limit", from: 8, now: now, limit: 5, want: []int{8, 9, 10}},
		{name: "only the current period", from: 10, now: now, limit: 5, want: []int{10}},
		{name: "nothing due yet", from: 11, now: now, limit: 5, want: nil},
		{name: "zero limit", from: 0, now: now, limit: 0, want: nil},
		{name: "negative limit", from: 0, now: now, limit: -1, want: nil},
		{name: "negative from starts at period 0", from: -3, now: now, limit: 2, want: []int{0, 1}},
		{name: "before the anchor", from: 0, now: at(t, "2026-01-01T08:00:00Z"), limit: 5, want: nil},
		{name: "exactly at a start", from: 9, now: at(t, "2026-01-11T09:00:00Z"), limit: 5, want: []int{9, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, s.Due(tt.from, tt.now, tt.limit))
		})
	}
}

func FuzzScheduleMonotonic(f *testing.F) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Europe/Moscow", "Australia/Lord_Howe", "Asia/Kolkata"}
	intervals := []period.Interval{period.Day, period.Week, period.Month, period.Quarter, period.Year}
	locations := make([]*time.Location, len(zones))
	for i, zone := range zones {
		locations[i] = loadLocation(f, zone)
	}

	f.Add(int64(1769848200), uint8(1), uint8(2), uint8(1), uint16(1)) // 2026-01-31 Berlin, monthly
	f.Add(int64(1774661400), uint8(1), uint8(0), uint8(1), uint16(0)) // 02:30 Berlin before the gap, daily
	f.Add(int64(1772868600), uint8(2), uint8(0), uint8(1), uint16(1)) // 02:30 New York before the gap, daily
	f.Add(int64(1835395200), uint8(4), uint8(4), uint8(1), uint16(3)) // 2028-02-29 Lord Howe, yearly
	f.Fuzz(func(t *testing.T, anchorUnix int64, zone, interval, count uint8, n uint16) {
		const until2100 = 4102444800 // seconds from 1970 to 2100
		s := period.Schedule{
			Anchor:   time.Unix((anchorUnix%until2100+until2100)%until2100, 0),
			Location: locations[int(zone)%len(locations)],
			Interval: intervals[int(interval)%len(intervals)],
			Count:    int(count)%12 + 1,
		}
		i := int(n % 500)

		start, next := s.Start(i), s.Start(i+1)
		require.True(t, start.Before(next), "Start(%d)=%s must be before Start(%d)=%s", i, start, i+1, next)
		require.Equal(t, i, s.IndexAt(start))
		require.Equal(t, i, s.IndexAt(next.Add(-time.Nanosecond)))
		require.Equal(t, start.In(s.Location).Format("2006-01-02"), s.Period(i).Key)
	})
}
