package charges_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/testkit/fsmtest"
)

func TestCanTransition(t *testing.T) {
	t.Parallel()
	allowed := map[charges.Status][]charges.Status{
		charges.Scheduled:      {charges.Authorizing, charges.Voided, charges.RequiresReview},
		charges.Authorizing:    {charges.Authorized, charges.Declined, charges.Failed, charges.Unknown, charges.Voided, charges.RequiresReview},
		charges.Authorized:     {charges.Capturing, charges.Voided, charges.Declined, charges.RequiresReview},
		charges.Capturing:      {charges.Succeeded, charges.Unknown, charges.RequiresReview, charges.Scheduled},
		charges.Declined:       {charges.Scheduled, charges.Failed, charges.Voided},
		charges.Failed:         {charges.Scheduled},
		charges.Unknown:        {charges.Authorizing, charges.Authorized, charges.Declined, charges.Failed, charges.Capturing, charges.Succeeded, charges.Voided, charges.RequiresReview, charges.Scheduled},
		charges.RequiresReview: {charges.Succeeded, charges.Failed, charges.Scheduled},
		charges.Succeeded:      nil,
		charges.Voided:         nil,
	}
	require.Len(t, allowed, len(charges.Statuses), "every status has a row")
	for _, from := range charges.Statuses {
		for _, to := range charges.Statuses {
			want := false
			for _, s := range allowed[from] {
				want = want || s == to
			}
			require.Equal(t, want, charges.CanTransition(from, to), "%s -> %s", from, to)
		}
	}
	// Money-moving rules the table encodes.
	require.False(t, charges.CanTransition(charges.Scheduled, charges.Capturing), "no capture without a hold")
	require.False(t, charges.CanTransition(charges.Declined, charges.Authorizing), "a new attempt starts scheduled, with a new key")
	require.False(t, charges.CanTransition(charges.Succeeded, charges.Scheduled), "a paid period is never retried")
	require.False(t, charges.CanTransition(charges.Capturing, charges.Voided), "a capture in flight finishes first")
	require.False(t, charges.CanTransition(charges.Capturing, charges.Authorizing), "an expired hold is placed again by a new attempt, with new keys")
}

// chargeStatusLiteral matches a charge status written as an SQL string
// literal. Subscription statuses share none of these words.
var chargeStatusLiteral = regexp.MustCompile(`'(scheduled|authorizing|authorized|capturing|succeeded|declined|failed|unknown|requires_review|voided)'`)

// No SQL outside the charge store names a charge status: the store builds
// every status condition from the constants, so the state machine has one
// home. Migrations (the schema's CHECK) and the simulated gateway (another
// company's ledger, with its own statuses) are not rebill's charge SQL.
func TestNoChargeStatusLiteralOutsideTheStore(t *testing.T) {
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
			if strings.HasPrefix(d.Name(), ".") || rel == "migrations" || rel == filepath.Join("charges", "gateway", "sim") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if ok && lit.Kind == token.STRING && chargeStatusLiteral.MatchString(lit.Value) {
				offenders = append(offenders, rel+": "+chargeStatusLiteral.FindString(lit.Value))
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "charge status literals in SQL; use the charges constants")
}

// Nor does SQL spell a charge status out of its constant, between quotes
// or through fsm.Quoted outside charges: that names the status as surely
// as a literal. The store's own conditions (statusInSQL) join the
// statuses it is handed, and stay the store's.
func TestNoChargeStatusSplicedIntoSQL(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoSplices(t, charges.Statuses)
}

// The one-statement moves pass only through statuses each leg allows: a
// hold and its capture's "about to call" recorded together, nothing else.
func TestPassesThrough(t *testing.T) {
	t.Parallel()
	via, ok := charges.PassesThrough(charges.Authorizing, charges.Capturing)
	require.True(t, ok)
	require.Equal(t, charges.Authorized, via)
	for _, from := range charges.Statuses {
		for _, to := range charges.Statuses {
			if from == charges.Authorizing && to == charges.Capturing {
				continue
			}
			_, ok := charges.PassesThrough(from, to)
			require.False(t, ok, "%s -> %s in one statement", from, to)
		}
	}
}
