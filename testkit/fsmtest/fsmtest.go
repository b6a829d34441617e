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
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
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
	RequireNoSplices(t, statuses, skip...)
}

// RequireNoSplices fails when a Go expression outside tests, in the
// module, writes one of statuses into SQL as a literal built from its
// constant: spliced between quotes ("status = '" + string(X) + "'"),
// formatted into them (fmt.Sprintf("status = '%s'", X)), or quoted by
// fsm.Quoted outside the package that declares it. Such text names a
// status as surely as a literal does, only out of sight of the literal
// ban; the owner's store builds its conditions (fsm.Quoted, for a
// partial index's predicate) from its own constants. Constants are found
// by name in the package of S, through each file's imports.
func RequireNoSplices[S ~string](t testing.TB, statuses []S, skip ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, s := range statuses {
		want[string(s)] = true
	}
	root := moduleRoot(t)
	module := modulePath(t, root)
	// The statuses' own package declares their constants: another
	// machine's status may share a word (cancelled) and is its own test's.
	owner, ours := strings.CutPrefix(reflect.TypeFor[S]().PkgPath(), module+"/")
	require.True(t, ours, "statuses of a type of the module")
	skipped := map[string]bool{"migrations": true}
	for _, s := range skip {
		skipped[filepath.FromSlash(s)] = true
	}
	offenders, files, err := spliceOffenders(root, module, owner, want, skipped)
	require.NoError(t, err)
	require.Greater(t, files, 50, "read the module's sources")
	require.Empty(t, offenders, "statuses written into SQL from their constants; pass them as parameters, or build the condition in their owner")
}

// spliceOffenders reads the non-test Go files under root (module path
// module) and returns where they write a status of want, declared in the
// package directory owner, into SQL from its constant; files is how many
// files it read, skipped ones aside.
func spliceOffenders(root, module, owner string, want, skipped map[string]bool) (offenders []string, files int, err error) {
	type source struct {
		rel  string
		dir  string
		file *ast.File
	}
	var sources []source
	consts := map[string]map[string]string{} // package directory -> constant -> value
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if (strings.HasPrefix(d.Name(), ".") && rel != ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil {
							if consts[dir] == nil {
								consts[dir] = map[string]string{}
							}
							consts[dir][name.Name] = v
						}
					}
				}
			}
		}
		if !skipped[rel] && !skippedDir(skipped, rel) {
			sources = append(sources, source{rel: rel, dir: dir, file: file})
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for _, f := range sources {
		imports := map[string]string{} // name in the file -> package directory
		for _, imp := range f.file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			dir, ours := strings.CutPrefix(path, module+"/")
			if !ours {
				continue
			}
			name := dir[strings.LastIndex(dir, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = dir
		}
		// status resolves e to one of statuses and the package declaring
		// it: a constant, by name or through an import, maybe converted.
		status := func(e ast.Expr) (string, bool) {
			for {
				call, ok := e.(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					break
				}
				if _, conv := call.Fun.(*ast.Ident); !conv {
					if _, conv := call.Fun.(*ast.SelectorExpr); !conv {
						break
					}
				}
				e = call.Args[0]
			}
			var dir, name string
			switch e := e.(type) {
			case *ast.Ident:
				dir, name = f.dir, e.Name
			case *ast.SelectorExpr:
				x, ok := e.X.(*ast.Ident)
				if !ok {
					return "", false
				}
				dir, name = imports[x.Name], e.Sel.Name
			default:
				return "", false
			}
			v, ok := consts[dir][name]
			if !ok || dir != owner || !want[v] {
				return "", false
			}
			return dir, true
		}
		done := map[ast.Node]bool{}
		ast.Inspect(f.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op != token.ADD || done[n] {
					return true
				}
				var parts []ast.Expr
				var flatten func(e ast.Expr)
				flatten = func(e ast.Expr) {
					if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
						done[b] = true
						flatten(b.X)
						flatten(b.Y)
						return
					}
					parts = append(parts, e)
				}
				flatten(n)
				text := func(e ast.Expr) string {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						return v
					}
					return ""
				}
				for i, part := range parts {
					if _, ok := status(part); !ok {
						continue
					}
					opened := i > 0 && strings.HasSuffix(text(parts[i-1]), "'")
					closed := i+1 < len(parts) && strings.HasPrefix(text(parts[i+1]), "'")
					if opened || closed {
						offenders = append(offenders, f.rel+": a status spliced between quotes")
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) == 0 {
					return true
				}
				switch sel.Sel.Name {
				case "Sprintf":
					format, ok := n.Args[0].(*ast.BasicLit)
					if !ok || !strings.Contains(format.Value, "'%") {
						return true
					}
					for _, arg := range n.Args[1:] {
						if _, ok := status(arg); ok {
							offenders = append(offenders, f.rel+": a status formatted between quotes")
						}
					}
				case "Quoted":
					for _, arg := range n.Args {
						if dir, ok := status(arg); ok && dir != f.dir {
							offenders = append(offenders, f.rel+": fsm.Quoted of another package's status")
						}
					}
				}
			}
			return true
		})
	}
	return offenders, len(sources), nil
}

// skippedDir reports whether rel lies under a skipped directory.
func skippedDir(skipped map[string]bool, rel string) bool {
	for dir := filepath.Dir(rel); dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if skipped[dir] {
			return true
		}
	}
	return false
}

// modulePath is the module's path, from go.mod at root.
func modulePath(t testing.TB, root string) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(mod), "\n") {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(path)
		}
	}
	require.Fail(t, "no module line in go.mod")
	return ""
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
