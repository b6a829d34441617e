package console

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableRe finds the table a statement names after FROM, JOIN, INTO or
// UPDATE (or DELETE FROM).
var tableRe = regexp.MustCompile(`(?i)\b(?:from|join|into|update)\s+([a-z_][a-z0-9_]*)`)

// The console reads subscriptions, charges, enrollments, bills, events and
// registry postings through their owners' read functions and use cases:
// its own SQL names only its own tables (console_sessions,
// console_actions).
func TestConsoleSQLNamesOnlyItsOwnTables(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		// SQL lives in raw string literals.
		for _, lit := range regexp.MustCompile("`[^`]*`").FindAllString(string(src), -1) {
			for _, m := range tableRe.FindAllStringSubmatch(lit, -1) {
				if !regexp.MustCompile(`(?i)\b(select|insert|update|delete)\b`).MatchString(lit) {
					continue // not a statement (a template, a doc string)
				}
				checked++
				require.True(t, strings.HasPrefix(m[1], "console_"), "%s: SQL over %s, which is not the console's: read it through its owner", f, m[1])
			}
		}
	}
	require.NotZero(t, checked, "the console's own statements were found")
}
