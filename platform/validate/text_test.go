package validate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rebill/rebill/rebilltype"
	"github.com/stretchr/testify/require"
)

func TestForbiddenInText(t *testing.T) {
	t.Parallel()
	refused := map[string]rune{
		"NUL": 0x00, "BEL": 0x07, "backspace": 0x08, "vertical tab": 0x0b, "form feed": 0x0c, "ESC": 0x1b,
		"unit separator": 0x1f, "DEL": 0x7f, "C1 PAD": 0x80, "NEL": 0x85, "CSI": 0x9b, "APC": 0x9f,
		"line separator": 0x2028, "paragraph separator": 0x2029,
		"LRE": 0x202a, "RLE": 0x202b, "PDF": 0x202c, "LRO": 0x202d, "RLO": 0x202e,
		"LRI": 0x2066, "RLI": 0x2067, "FSI": 0x2068, "PDI": 0x2069,
		"noncharacter FDD0": 0xfdd0, "noncharacter FDEF": 0xfdef, "U+FFFE": 0xfffe, "U+FFFF": 0xffff,
		"U+1FFFF": 0x1ffff, "U+10FFFE": 0x10fffe, "U+10FFFF": 0x10ffff,
	}
	for name, r := range refused {
		for _, s := range []string{string(r), "gpj" + string(r) + ".exe", "Оплата " + string(r)} {
			got, bad := ForbiddenInText(s)
			require.True(t, bad, "%s in %q", name, s)
			require.Equal(t, r, got, name)
			got, bad = ForbiddenInID(s)
			require.True(t, bad, "%s in %q", name, s)
			require.Equal(t, r, got, name)
		}
	}
	allowed := map[string]string{
		"tab and line breaks":          "a\tb\nc\r\nd",
		"emoji with zero-width joiner": "👩\u200d💻 and 👨\u200d👩\u200d👧",
		"persian with non-joiner":      "می\u200cخواهم",
		"hebrew with rlm":              "שלום\u200f 123",
		"arabic with lrm":              "مرحبا \u200eABC\u200e",
		"soft hyphen":                  "Abon\u00adnement",
		"arabic letter mark":           "\u061c١٢٣",
		"word joiner":                  "a\u2060b",
		"no-break space":               "10\u00a0000 ₽",
		"U+FFFD":                       "\ufffd",
		"U+FDCF and U+FDF0":            "\ufdcf\ufdf0",
		"U+FFFC":                       "\ufffc",
		"latin-1 letters":              "Ünïcödé — ok",
		"cyrillic":                     "Абонемент в спортзал",
	}
	for name, s := range allowed {
		_, bad := ForbiddenInText(s)
		require.False(t, bad, name)
	}
	for _, s := range []string{"a\tb", "a\nb", "a\rb"} {
		_, bad := ForbiddenInID(s)
		require.True(t, bad, "%q in an id", s)
	}
	require.Equal(t, "must not contain U+202E: control characters (other than tab, line feed and carriage return), "+
		"line and paragraph separators, noncharacters and bidirectional overrides and isolates are refused", TextMessage(0x202e))
}

func TestHasVisible(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", " ", "   ", "\t", "\u00a0", "\u3000", "\u200b", "\u200d\u200c", "\ufeff", "\u3164", "\u2060 \u00ad"} {
		require.False(t, rebilltype.HasVisible(s), "%q", s)
	}
	for _, s := range []string{"a", " a ", "-", ".", "cust 42", "Ж", "👍", "\u200bx"} {
		require.True(t, rebilltype.HasVisible(s), "%q", s)
	}
}

// TestDecodeRefusesForbiddenText: every string and key of a body is
// checked, and the field is named without the value.
func TestDecodeRefusesForbiddenText(t *testing.T) {
	t.Parallel()
	var dst testRequest
	err := Decode([]byte(`{"customer_id":"c\u001b[31m","metadata":{"k\u202e":"v","note":"a\u2028b"}}`), &dst)
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []rebilltype.FieldError{
		{Field: "customer_id", Message: TextMessage(0x1b)},
		{Field: "metadata", Message: "keys " + TextMessage(0x202e)},
		{Field: "metadata.note", Message: TextMessage(0x2028)},
	}, de.Errors)
	require.NotContains(t, de.Error(), "31m")
}

// FuzzForbiddenInText checks the byte-level fast path against a rune by
// rune reading of the rules.
func FuzzForbiddenInText(f *testing.F) {
	for _, s := range []string{"", "abc", "a\x1bb", "\u202e", "\uffff", "é\u0085", "\xff\xfe", "\U0010ffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, wantBad := rune(0), false
		for _, r := range s {
			if r < 0x20 && !strings.ContainsRune("\t\n\r", r) || r == 0x7f || 0x80 <= r && r <= 0x9f ||
				r == 0x2028 || r == 0x2029 || 0x202a <= r && r <= 0x202e || 0x2066 <= r && r <= 0x2069 ||
				0xfdd0 <= r && r <= 0xfdef || r&0xffff >= 0xfffe {
				want, wantBad = r, true
				break
			}
		}
		got, bad := ForbiddenInText(s)
		require.Equal(t, wantBad, bad, fmt.Sprintf("%q", s))
		require.Equal(t, want, got)
	})
}
