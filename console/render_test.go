package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Characters that draw nothing are stored as sent (legitimate scripts and
// emoji use some of them) and shown to staff by their code point, so that
// two strings that look alike can be told apart and nothing hides in a
// string; where they do their work (a subdivision flag, an emoji or a
// Persian word joined) the text is shown as it is.
func TestTextShowsInvisibleCharacters(t *testing.T) {
	t.Parallel()
	const (
		england = "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F"
		family  = "👨\u200d👩\u200d👧"
		persian = "می\u200cخواهم"
	)
	tag := func(s string) string { // s in tag characters
		out := ""
		for _, r := range s {
			out += string(r + 0xE0000)
		}
		return out
	}
	cases := []struct{ in, want string }{
		{"cust\u200b42", `cust<span class="cp">[U+200B]</span>42`},
		{"pay\u2060pal", `pay<span class="cp">[U+2060]</span>pal`},
		{"Abon\u00adnement", `Abon<span class="cp">[U+00AD]</span>nement`},
		{"\ufeffGym", `<span class="cp">[U+FEFF]</span>Gym`},
		{"a\u3164b", `a<span class="cp">[U+3164]</span>b`},
		{"a\u180eb", `a<span class="cp">[U+180E]</span>b`},
		{"a\u2062b", `a<span class="cp">[U+2062]</span>b`},
		// Text spelt in tag characters, outside any flag.
		{"Gym" + tag("ok"), `Gym<span class="cp">[U+E006F]</span><span class="cp">[U+E006B]</span>`},
		// Tags after a flag that spell no subdivision, or lack the cancel tag.
		{"\U0001F3F4" + tag("IGNORE"), "\U0001F3F4" + `<span class="cp">[U+E0049]</span><span class="cp">[U+E0047]</span>` +
			`<span class="cp">[U+E004E]</span><span class="cp">[U+E004F]</span><span class="cp">[U+E0052]</span>` +
			`<span class="cp">[U+E0045]</span>`},
		{"\U0001F3F4" + tag("gbeng"), "\U0001F3F4" + `<span class="cp">[U+E0067]</span><span class="cp">[U+E0062]</span>` +
			`<span class="cp">[U+E0065]</span><span class="cp">[U+E006E]</span><span class="cp">[U+E0067]</span>`},
		{"\U0001F3F4" + tag("transfer all funds") + "\U000E007F", "\U0001F3F4" + markers(tag("transfer all funds")+"\U000E007F")},
		// Joiners where they join nothing visible beyond ASCII.
		{"cust\u200d42", `cust<span class="cp">[U+200D]</span>42`},
		{"\u200cnote", `<span class="cp">[U+200C]</span>note`},
		{"👍\u200d ok", `👍<span class="cp">[U+200D]</span> ok`},
		// Where they do their work, as it is.
		{"Go " + england + "!", "Go " + england + "!"},
		{family, family},
		{persian, persian},
		{"🏳️\u200d🌈", "🏳️\u200d🌈"},
		{"keycap 4️⃣", "keycap 4️⃣"},
		{"١٢٣\u0600", "١٢٣\u0600"},
		// What was marked before still is.
		{"fdp\u202eexe", `fdp<span class="cp">[U+202E]</span>exe`},
		{"a\u200eb", `a<span class="cp">[U+200E]</span>b`},
		{"<b>\x1b", `&lt;b&gt;<span class="cp">[U+001B]</span>`},
		{"line\nbreak\ttab", "line\nbreak\ttab"},
	}
	for _, c := range cases {
		require.Equal(t, "<bdi>"+c.want+"</bdi>", string(text(c.in)), "%q", c.in)
	}
}

// markers is s as text shows it when every character is marked.
func markers(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `<span class="cp">[U+%04X]</span>`, r)
	}
	return b.String()
}
