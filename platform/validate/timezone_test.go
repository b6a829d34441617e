package validate

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimeZone(t *testing.T) {
	t.Parallel()

	instant := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		wantOffset int // seconds east of UTC at instant; checked when valid
		wantErr    bool
	}{
		{name: "Europe/Moscow", wantOffset: 3 * 3600},
		{name: "UTC"},
		{name: "Etc/UTC"},
		{name: "America/New_York", wantOffset: -4 * 3600},
		{name: "Asia/Kolkata", wantOffset: 5*3600 + 1800},
		{name: "America/Argentina/Buenos_Aires", wantOffset: -3 * 3600},
		{name: "America/Port-au-Prince", wantOffset: -4 * 3600},
		{name: "Etc/GMT+3", wantOffset: -3 * 3600},
		{name: "Asia/Kathmandu", wantOffset: 5*3600 + 2700},

		{name: "", wantErr: true},
		{name: "Local", wantErr: true},
		{name: "localtime", wantErr: true},
		{name: "posixrules", wantErr: true},
		{name: "Factory", wantErr: true},
		{name: "right/UTC", wantErr: true},
		{name: "posix/Europe/Moscow", wantErr: true},
		{name: "../etc/passwd", wantErr: true},
		{name: "Europe/../UTC", wantErr: true},
		{name: "Europe/./Moscow", wantErr: true},
		{name: "/etc/localtime", wantErr: true},
		{name: "/UTC", wantErr: true},
		{name: "Europe//Moscow", wantErr: true},
		{name: "Europe/Moscow/", wantErr: true},
		{name: `Europe\Moscow`, wantErr: true},
		{name: "Europe/Moscow ", wantErr: true},
		{name: "UTC\x00", wantErr: true},
		{name: "europe/moscow", wantErr: true},
		{name: "Mars/Olympus_Mons", wantErr: true},
		{name: "MSK", wantErr: true},
		{name: "+03:00", wantErr: true},
		{name: "zone.tab", wantErr: true},
		{name: "+VERSION", wantErr: true},
		{name: "Europe/" + strings.Repeat("A", 100), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			loc, err := TimeZone(tt.name)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrTimeZone)
				require.Nil(t, loc)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.name, loc.String())
			_, offset := instant.In(loc).Zone()
			require.Equal(t, tt.wantOffset, offset)

			again, err := TimeZone(tt.name)
			require.NoError(t, err)
			require.Same(t, loc, again)
		})
	}
}
