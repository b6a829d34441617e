// Package fsmtest holds the checks every state machine's tests make: its
// table is the one written out in the test, and no SQL outside its store
// names its statuses as literals.
package fsmtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/internal/fsm"
)

// RequireMoves checks every pair of m's statuses against want, the table
// written out again by the test: a move added to or dropped from the
// machine without the test fails it.
func RequireMoves[S ~string](t testing.TB, m *fsm.Machine[S], want map[S][]S) {
	t.Helper()
	require.Len(t, want, len(m.Statuses()), "every %s status has a row", m.Name())
	for _, from := range m.Statuses() {
		for _, to := range m.Statuses() {
			allowed := false
			for _, s := range want[from] {
				allowed = allowed || s == to
			}
			require.Equal(t, allowed, m.Can(from, to), "%s %s -> %s", m.Name(), from, to)
		}
	}
}

// RequireNoLiterals fails when a Go string literal outside tests, in the
// module, names one of statuses in single quotes (an SQL literal): SQL
// builds its status conditions from the constants, so that a machine's
// statuses have one home. Migrations (the schema's CHECKs) and skip
// (paths from the module root: simulators keeping another company's
// ledger, with statuses of its own) are not rebill's SQL of that machine.
func RequireNoLiterals[S ~string](t testing.TB, statuses []S, skip ...string) {
	t.Helper()
	words := make([]string, len(statuses))
	for i, s := range statuses {
		words[i] = regexp.QuoteMeta(string(s))
	}
	literal := regexp.MustCompile(`'(` + strings.Join(words, "|") + `)'`)
	root := moduleRoot(t)
	skipped := map[string]bool{"migrations": true}
	for _, s := range skip {
		skipped[filepath.FromSlash(s)] = true
	}
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if (strings.HasPrefix(d.Name(), ".") && rel != ".") || skipped[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || skipped[rel] {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if ok && lit.Kind == token.STRING && literal.MatchString(lit.Value) {
				offenders = append(offenders, rel+": "+literal.FindString(lit.Value))
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "status literals in SQL; build the condition from the constants")
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}
