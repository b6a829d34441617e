package charges_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chargesUpdate finds an UPDATE of the charges table and captures its
// assignments: what follows SET up to the first clause after them.
var chargesUpdate = regexp.MustCompile(`(?is)\bUPDATE\s+charges\b(?:\s+(?:AS\s+)?\w+)?\s+SET\b(.*?)(?:\bWHERE\b|\bFROM\b|\bRETURNING\b|$)`)

// statusAssignment is an assignment to the status column in a SET list.
var statusAssignment = regexp.MustCompile(`(?is)(?:^|,)\s*(?:\w+\.)?status\s*=`)

// writesChargeStatus reports whether sql, an SQL text or a part of one,
// assigns a charge's status.
func writesChargeStatus(sql string) bool {
	for _, m := range chargesUpdate.FindAllStringSubmatch(sql, -1) {
		if statusAssignment.MatchString(m[1]) {
			return true
		}
	}
	return false
}

// The detector below must be able to fail: it sees the statements the
// store replaced, written as they were, and lets alone the writes of other
// columns and other tables.
func TestWritesChargeStatusDetector(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{
		`UPDATE charges SET status = $3, updated_at = $1 WHERE id = $2`,
		`UPDATE charges SET failure_code = $2,
			status = $4 WHERE enrollment_id = $1`,
		`WITH swept AS (SELECT 1) UPDATE charges SET updated_at = $1, status = $3 FROM swept`,
		`update charges c set c.status = 'failed'`,
	} {
		require.True(t, writesChargeStatus(sql), sql)
	}
	for _, sql := range []string{
		`UPDATE charges SET void_requested = true, updated_at = $2 WHERE status = ANY($3)`,
		`UPDATE charges SET next_attempt_at = $4, failure_code = $5 WHERE id = $1 AND status = $3`,
		`UPDATE subscriptions SET status = $2 WHERE id = $1`,
		`UPDATE charges c SET identity_held = false FROM bills b WHERE b.status = $1`,
		`SELECT status FROM charges`,
	} {
		require.False(t, writesChargeStatus(sql), sql)
	}
}

// storeFiles are where a charge's status may be written: the store's one
// statement, built from a transition the table allows.
var storeFiles = map[string]bool{filepath.Join("charges", "store.go"): true}

// Every statement that changes a charge's status is the store's: no SQL
// elsewhere, in this package or another, assigns charges.status, so every
// move is checked against the transition table and publishes its event.
// A string built with + is read whole, its non-literal parts left out.
// Migrations (the schema) and tests (fixtures) are not moves.
func TestNoChargeStatusWriteOutsideTheStore(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var offenders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || rel == "migrations" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || storeFiles[rel] {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			expr, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			text, ok := stringText(expr)
			if !ok {
				return true
			}
			if writesChargeStatus(text) {
				offenders = append(offenders, rel+": "+strings.Join(strings.Fields(text), " "))
			}
			return false // its parts are in text
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "statements writing charges.status outside the store; move them through charges.Store")
}

// stringText is the text of a string literal, or of a + expression that
// holds one, with its other operands left out; ok is false for anything
// else.
func stringText(e ast.Expr) (text string, ok bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.ParenExpr:
		return stringText(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, xok := stringText(e.X)
		y, yok := stringText(e.Y)
		return x + " " + y, xok || yok
	}
	return "", false
}
