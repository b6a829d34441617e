package validate

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("k", MaxIdempotencyKeyLen)
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{name: "bare token", values: []string{"abc"}, want: "abc"},
		{name: "quoted string", values: []string{`"abc"`}, want: "abc"},
		{name: "uuid", values: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "quoted uuid", values: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "case is kept", values: []string{"AbC"}, want: "AbC"},
		{name: "inner space", values: []string{"a b"}, want: "a b"},
		{name: "punctuation", values: []string{`!#$%&'()*+,-./:;<=>?@[\]^_{|}~`}, want: `!#$%&'()*+,-./:;<=>?@[\]^_{|}~`},
		{name: "escaped quote", values: []string{`"a\"b"`}, want: `a"b`},
		{name: "escaped backslash", values: []string{`"a\\b"`}, want: `a\b`},
		{name: "quote inside a bare key", values: []string{`ab"c`}, want: `ab"c`},
		{name: "surrounding whitespace", values: []string{" \tabc\t "}, want: "abc"},
		{name: "quoted with surrounding whitespace", values: []string{` "abc" `}, want: "abc"},
		{name: "quoted with inner spaces", values: []string{`" a "`}, want: " a "},
		{name: "255 characters", values: []string{long}, want: long},
		{name: "quoted 255 characters", values: []string{`"` + long + `"`}, want: long},
		{name: "255 escaped characters", values: []string{`"` + strings.Repeat(`\\`, MaxIdempotencyKeyLen) + `"`}, want: strings.Repeat(`\`, MaxIdempotencyKeyLen)},

		{name: "missing", values: nil, wantErr: ErrIdempotencyKeyMissing},
		{name: "empty list", values: []string{}, wantErr: ErrIdempotencyKeyMissing},
		{name: "sent twice", values: []string{"abc", "abc"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "sent twice, different", values: []string{"abc", "def"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "empty", values: []string{""}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "only spaces", values: []string{"   "}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "empty quoted", values: []string{`""`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "256 characters", values: []string{long + "k"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "quoted 256 characters", values: []string{`"` + long + `k"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "256 escaped characters", values: []string{`"` + strings.Repeat(`\"`, MaxIdempotencyKeyLen+1) + `"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "control character", values: []string{"ab\x01c"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "inner tab", values: []string{"a\tb"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "DEL", values: []string{"ab\x7f"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "non-ASCII", values: []string{"ключ"}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "non-ASCII quoted", values: []string{`"ключ"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "unterminated quote", values: []string{`"abc`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "lone quote", values: []string{`"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "escaped closing quote", values: []string{`"abc\"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "data after the closing quote", values: []string{`"abc"x`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "parameters", values: []string{`"abc";a=1`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "unknown escape", values: []string{`"a\nb"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "unescaped inner quote", values: []string{`"a"b"`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "quoted spaces only", values: []string{`"   "`}, wantErr: ErrIdempotencyKeyInvalid},
		{name: "quoted spaces around a key", values: []string{`"  a  "`}, want: "  a  "},
		{name: "huge quoted value", values: []string{`"` + strings.Repeat("k", 1<<20) + `"`}, wantErr: ErrIdempotencyKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := IdempotencyKey(tt.values)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Empty(t, got)
			if len(tt.values) == 1 {
				if v := strings.Trim(tt.values[0], " \t\""); len(v) > 1 {
					require.NotContains(t, err.Error(), v, "errors must not echo the key")
				}
			}
		})
	}
}

func TestIdempotencyKeyErrorsAreDistinct(t *testing.T) {
	t.Parallel()

	_, err := IdempotencyKey(nil)
	require.False(t, errors.Is(err, ErrIdempotencyKeyInvalid))

	_, err = IdempotencyKey([]string{"a", "b"})
	require.False(t, errors.Is(err, ErrIdempotencyKeyMissing))
	require.ErrorContains(t, err, "sent twice")
}
