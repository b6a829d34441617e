package config_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rebill/rebill/app/config"
)

// helpRowRe splits a row of `rebill serve --help`'s table: its columns are
// padded with at least two spaces, and no cell holds two spaces in a row.
var helpRowRe = regexp.MustCompile(`^(\S+) {2,}(\S.*?) {2,}(\S.*)$`)

// operatingTable renders the settings table `rebill serve --help` prints
// as the Markdown table of docs/operating.md.
func operatingTable(t *testing.T) string {
	t.Helper()
	var help bytes.Buffer
	config.PrintHelp(&help)
	lines := strings.Split(strings.TrimRight(help.String(), "\n"), "\n")
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for i, line := range lines {
		m := helpRowRe.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("serve --help: line %d %q is no row of three columns", i+1, line)
		}
		if i == 0 {
			continue // the header
		}
		def := "–"
		if m[2] != "-" {
			def = "`" + m[2] + "`"
		}
		b.WriteString("| `" + m[1] + "` | " + def + " | " + strings.ReplaceAll(m[3], "|", `\|`) + " |\n")
	}
	return b.String()
}

// docs/operating.md's settings table is what `rebill serve --help` prints,
// row for row: the code's list of settings is the source, so a setting
// added, renamed or explained anew in the code fails here until the page
// says the same. REBILL_UPDATE_DOCS=1 rewrites the page's table.
func TestOperatingSettingsTableIsServeHelp(t *testing.T) {
	t.Parallel()
	const page = "../../docs/operating.md"
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	const header = "| variable | default | meaning |\n"
	start := strings.Index(doc, header)
	if start < 0 {
		t.Fatalf("%s: no table starting %q", page, header)
	}
	end := start
	for end < len(doc) && doc[end] == '|' {
		end += strings.IndexByte(doc[end:], '\n') + 1
	}
	want := operatingTable(t)
	if got := doc[start:end]; got != want {
		if os.Getenv("REBILL_UPDATE_DOCS") == "1" {
			if err := os.WriteFile(page, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: settings table rewritten from serve --help", page)
			return
		}
		t.Fatalf("%s's settings table is not what `rebill serve --help` prints "+
			"(REBILL_UPDATE_DOCS=1 go test -run %s ./app/config rewrites it); want:\n%s", page, t.Name(), want)
	}
}
