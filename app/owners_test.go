package app_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableOwners says which package holds each table: its INSERTs, its
// status changes and its reads. Keys are table names as the SQL spells
// them; values are import paths below the module. docs/DESIGN.md ("Where
// each table lives") prints this map and the crossings below.
var tableOwners = map[string]string{
	"subscriptions":                         "subscriptions",
	"subscription_events":                   "subscriptions",
	"subscription_changes":                  "subscriptions",
	"subscription_credits":                  "subscriptions",
	"charges":                               "charges",
	"charges_layout":                        "charges",
	"registry_postings":                     "charges",
	"refunds":                               "charges",
	"zhkh_reports":                          "zhkh",
	"enrollments":                           "enrollments",
	"bills":                                 "enrollments",
	"events":                                "notify",
	"webhook_endpoints":                     "notify",
	"webhook_attempts":                      "notify",
	"payment_tokens":                        "vault",
	"idempotency_keys":                      "api/idempotency",
	"api_keys":                              "apikeys",
	"reconciliation_days":                   "books",
	"reconciliation_discrepancies":          "books",
	"registry_reconciliation_days":          "books",
	"registry_reconciliation_discrepancies": "books",
	"velocity_counters":                     "velocity",
	"bill_source_cursors":                   "autopay",
	"bill_source_cursor_history":            "autopay",
	"bill_source_enrollments":               "autopay",
	"console_sessions":                      "console",
	"console_actions":                       "console",
	// Dev mode and the simulators: the tables behind a fake clock, bill
	// source, registry and gateways.
	"dev_clock":                   "platform/clock",
	"dev_bill_source":             "autopay",
	"dev_registry_ledger":         "charges/registry/sim",
	"dev_registry_faults":         "charges/registry/sim",
	"dev_zhkh_ledger":             "zhkh/party/sim",
	"dev_zhkh_faults":             "zhkh/party/sim",
	"gatewaysim.operations":       "charges/gateway/sim",
	"gatewaysim.call_counters":    "charges/gateway/sim",
	"gatewaysim.faults":           "charges/gateway/sim",
	"gatewaysim.token_first_seen": "charges/gateway/sim",
}

// A crossing is a statement outside a table's owner that the layout
// allows, by name and with its reason: a read-only judge that checks the
// owner's books (it must not depend on the owner's view of them), a test
// kit writing books no verb produces, or the notice scan. A write allows the reads too. In
// is a package's import path below the module, or one file of it
// (package/file.go).
type crossing struct {
	in    string
	table string
	write bool
	why   string
}

var crossings = []crossing{
	// Read-only judges: they read the books they judge from the tables,
	// so that a bug in an owner's reads cannot hide itself from them.
	{in: "audit", table: "enrollments", why: "rebill audit judges bills and their enrollments"},
	{in: "audit", table: "bills", why: "rebill audit judges bills and their enrollments"},
	{in: "cmd/rebill-bench/bench.go", table: "charges", why: "bench's exactly-once check counts the run's charges per period"},
	{in: "cmd/rebill-bench/bench.go", table: "subscriptions", why: "bench's exactly-once check finds the run's subscriptions without a charge"},

	// Test kits: they write books no owner's verb produces (years of
	// history, a duplicate capture), to measure or to judge the judges.
	{in: "bench/fill.go", table: "subscriptions", write: true, why: "bench's history fill: years of settled subscriptions in one statement each"},
	{in: "bench/fill.go", table: "charges", write: true, why: "bench's history fill: years of settled charges"},
	{in: "bench/fill.go", table: "events", write: true, why: "bench's history fill: the notices its history already sent"},
	{in: "bench/fill.go", table: "reconciliation_days", write: true, why: "bench's history fill: the days its history already reconciled"},
	{in: "bench/bench.go", table: "subscriptions", write: true, why: "bench's run inserts its subscriptions, due now, in bulk before it measures"},
	{in: "testkit/opstest", table: "subscriptions", write: true, why: "ops tests write the books a case needs without driving the pipeline"},
	{in: "testkit/opstest", table: "enrollments", write: true, why: "ops tests write the books a case needs without driving the pipeline"},
	{in: "testkit/opstest", table: "charges", write: true, why: "ops tests write the books a case needs (a duplicate capture) without driving the pipeline"},
	{in: "testkit/opstest", table: "refunds", write: true, why: "ops tests write refunds the books must match (one the gateway never made) without driving the refund jobs"},
	{in: "testkit/opstest", table: "gatewaysim.operations", write: true, why: "ops tests write a simulated gateway's ledger entries (a capture nobody asked for)"},

	// The trial and card-expiry notice scans pick the subscriptions still
	// owed a notice in one statement with the events already sent, so
	// that a batch's LIMIT counts only notices due. A renewal's notice
	// goes through the owner (RenewalsToNotice, MarkUpcomingNoticed).
	{in: "notify/notices.go", table: "subscriptions", why: "the trial and card-expiry notice scans read subscriptions beside the events already sent"},
}

// exportedFragments are the exported pieces of SQL over a table that
// another package's statement embeds, by Go name, with why the read is not
// a function of the owner. Each is a crossing the scan above cannot see
// (the text is in the owner's file), so it is listed here by name.
var exportedFragments = map[string]string{
	"vault.SealedSQL": "the hold's \"about to call\" (charges, wired in app/service.go) returns the sealed " +
		"token of the very pm_token it sends, under the row's lock, in its own statement: a read of " +
		"payment_tokens of its own would be one statement more per charge (BENCHMARKS.md: 2.19 -> 1.20)",
}

// runtimeTables are the files whose statements name their table by a Go
// value (FROM `+b.days+`), which the scan cannot read, each with the
// tables its values name. A fragment named ...SQL is read where it is
// declared instead.
var runtimeTables = map[string]string{
	"books/store.go":  "one store for the gateways' and the registry's books: its own reconciliation tables, chosen by book",
	"vault/tokens.go": "the token columns' statements written once (TableTokens): each owner (subscriptions, charges, enrollments) hands in its own table's name as a constant of its package",
}

// namedAtRunTime matches SQL text that ends where a table's name is due.
// Its keywords are in capitals, as rebill writes SQL, so that prose
// ("retry backoff from "+d) is not taken for a statement.
var namedAtRunTime = regexp.MustCompile(`\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|JOIN|USING)\s*$`)

// extractFrom is EXTRACT(field FROM ...), whose FROM names no table.
var extractFrom = regexp.MustCompile(`(?i)extract\s*\(\s*\w+\s+from\s*$`)

// sqlStatement finds the tables a piece of SQL names and whether it writes
// them: the word after INSERT INTO, UPDATE, DELETE FROM, MERGE INTO,
// TRUNCATE and COPY writes; after FROM, JOIN, USING and TABLE it reads.
// Words that are not tables (FOR UPDATE OF, EXTRACT(... FROM x)) name no
// table of tableOwners and fall away.
var sqlStatement = regexp.MustCompile(`(?i)\b(insert\s+into|update|delete\s+from|merge\s+into|truncate(?:\s+table)?|copy|from|join|using|table)\s+(?:only\s+)?([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)`)

type tableUse struct {
	pkg, file, table string
	write            bool
	at               string
}

// notSQL tells calls whose string arguments are messages, not statements:
// an error text such as "update charges: %w" names a table without
// touching it.
func notSQL(call *ast.CallExpr) bool {
	var name string
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		name = fn.Sel.Name
	case *ast.Ident:
		name = fn.Name
	}
	switch name {
	case "Errorf", "New", "Error", "Warn", "Info", "Debug", "Printf", "Println", "Print", "Fatalf", "Fatal",
		"ErrorContext", "WarnContext", "InfoContext", "DebugContext", "Fprintln", "Wrap":
		return true
	}
	return false
}

// tableUses reads every non-test Go file of the module and returns each
// table a string literal of it names in a statement.
func tableUses(t *testing.T, root string) (uses []tableUse, fragments, runtime []string) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pkg := filepath.ToSlash(filepath.Dir(rel))
		messages := map[*ast.BasicLit]bool{}
		fragments = append(fragments, exportedSQL(file, pkg)...)
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op != token.ADD {
					return true
				}
				lit, ok := rightmostLiteral(n.X)
				if !ok {
					return true
				}
				text, err := strconv.Unquote(lit.Value)
				if err != nil || !namedAtRunTime.MatchString(text) || extractFrom.MatchString(text) || fragmentName(n.Y) {
					return true
				}
				runtime = append(runtime, rel+" ("+fset.Position(n.Pos()).String()+")")
			case *ast.CallExpr:
				if notSQL(n) {
					for _, arg := range n.Args {
						if lit, ok := arg.(*ast.BasicLit); ok {
							messages[lit] = true
						}
					}
				}
			case *ast.Field:
				if n.Tag != nil {
					messages[n.Tag] = true
				}
			case *ast.ImportSpec:
				messages[n.Path] = true
			case *ast.BasicLit:
				if n.Kind != token.STRING || messages[n] {
					return true
				}
				text, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				for _, m := range sqlStatement.FindAllStringSubmatch(text, -1) {
					table := strings.ToLower(m[2])
					if _, known := tableOwners[table]; !known {
						continue
					}
					verb := strings.ToLower(strings.Fields(m[1])[0])
					write := verb != "from" && verb != "join" && verb != "using" && verb != "table"
					uses = append(uses, tableUse{pkg: pkg, file: rel, table: table, write: write, at: fset.Position(n.Pos()).String()})
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return uses, fragments, runtime
}

// rightmostLiteral is the string literal that ends e, a + chain.
func rightmostLiteral(e ast.Expr) (*ast.BasicLit, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e, e.Kind == token.STRING
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return rightmostLiteral(e.Y)
		}
	case *ast.ParenExpr:
		return rightmostLiteral(e.X)
	}
	return nil, false
}

// fragmentName reports whether e names a piece of SQL (an identifier
// ending in SQL), read where it is declared.
func fragmentName(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return strings.HasSuffix(e.Name, "SQL")
	case *ast.SelectorExpr:
		return strings.HasSuffix(e.Sel.Name, "SQL")
	case *ast.CallExpr:
		return fragmentName(e.Fun)
	}
	return false
}

// namesTable reports whether n holds a string literal that names a table
// in a statement.
func namesTable(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING || found {
			return !found
		}
		text, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		for _, m := range sqlStatement.FindAllStringSubmatch(text, -1) {
			if _, known := tableOwners[strings.ToLower(m[2])]; known {
				found = true
			}
		}
		return !found
	})
	return found
}

// exportedSQL lists the exported names of file (package pkg) that hand
// out SQL: a constant or variable whose text names a table, a function
// returning a string it builds from one, or any exported name ending in
// SQL.
func exportedSQL(file *ast.File, pkg string) []string {
	name := path.Base(pkg) + "."
	var out []string
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.GenDecl:
			if d.Tok != token.CONST && d.Tok != token.VAR {
				continue
			}
			for _, spec := range d.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !id.IsExported() {
						continue
					}
					if strings.HasSuffix(id.Name, "SQL") || (i < len(vs.Values) && namesTable(vs.Values[i])) {
						out = append(out, name+id.Name)
					}
				}
			}
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Recv != nil {
				continue
			}
			res := d.Type.Results
			returnsString := res != nil && len(res.List) == 1 && len(res.List[0].Names) <= 1
			if returnsString {
				ident, ok := res.List[0].Type.(*ast.Ident)
				returnsString = ok && ident.Name == "string"
			}
			returnsSQL := false
			if returnsString && d.Body != nil {
				ast.Inspect(d.Body, func(n ast.Node) bool {
					if ret, ok := n.(*ast.ReturnStmt); ok && len(ret.Results) == 1 && namesTable(ret.Results[0]) {
						returnsSQL = true
					}
					return !returnsSQL
				})
			}
			if strings.HasSuffix(d.Name.Name, "SQL") || returnsSQL {
				out = append(out, name+d.Name.Name)
			}
		}
	}
	return out
}

// declaredTables lists the tables the schema creates: every CREATE TABLE
// in the module's .sql files (migrations and the simulators' schemas).
func declaredTables(t *testing.T, root string) []string {
	t.Helper()
	create := regexp.MustCompile(`(?i)create\s+table\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)`)
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".sql") {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range create.FindAllStringSubmatch(string(body), -1) {
			seen[strings.ToLower(m[1])] = true
		}
		return nil
	})
	require.NoError(t, err)
	var tables []string
	for table := range seen {
		tables = append(tables, table)
	}
	sort.Strings(tables)
	return tables
}

func (c crossing) covers(u tableUse) bool {
	return (c.in == u.pkg || c.in == u.file) && c.table == u.table && (c.write || !u.write)
}

func TestEveryTableIsWrittenByItsOwner(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	tables := declaredTables(t, root)
	require.Greater(t, len(tables), 20, "found the schema's CREATE TABLEs")
	for _, table := range tables {
		_, owned := tableOwners[table]
		require.True(t, owned, "table %s has no owner: add it to tableOwners and DESIGN.md", table)
	}
	uses, fragments, runtime := tableUses(t, root)
	for _, r := range runtime {
		file, _, _ := strings.Cut(r, " ")
		_, listed := runtimeTables[file]
		require.True(t, listed, "%s names a table by a Go value, which this scan cannot read: write the name in the statement", r)
	}
	for file := range runtimeTables {
		found := false
		for _, r := range runtime {
			found = found || strings.HasPrefix(r, file+" ")
		}
		require.True(t, found, "%s no longer names a table by a Go value: remove it from runtimeTables", file)
	}
	for _, f := range fragments {
		_, listed := exportedFragments[f]
		require.True(t, listed, "%s hands out SQL over a table: give its owner a query function instead", f)
	}
	for f := range exportedFragments {
		require.Contains(t, fragments, f, "exported fragment %s is gone: remove it from exportedFragments and DESIGN.md", f)
	}
	require.Greater(t, len(uses), 100, "found the module's SQL")
	used := make([]bool, len(crossings))
	var stray []string
	for _, u := range uses {
		owner := tableOwners[u.table]
		if u.pkg == owner {
			continue
		}
		allowed := false
		for i, c := range crossings {
			if c.covers(u) {
				used[i], allowed = true, true
			}
		}
		if !allowed {
			verb := "reads"
			if u.write {
				verb = "writes"
			}
			stray = append(stray, fmt.Sprintf("%s %s %s (owner %s)", u.at, verb, u.table, owner))
		}
	}
	require.Empty(t, stray, "statements over a table outside its owner: move them behind a function of the owner, or list the crossing with its reason")
	var unused []string
	for i, c := range crossings {
		if !used[i] {
			unused = append(unused, fmt.Sprintf("%s %s", c.in, c.table))
		}
	}
	require.Empty(t, unused, "crossings no statement makes any more: remove them here and in DESIGN.md")
}

// docs/DESIGN.md's "Where each table lives" prints tableOwners row by
// row, and names every crossing and exported fragment: the reader's map is
// the test's.
func TestDesignListsTheTableOwners(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../docs/DESIGN.md")
	require.NoError(t, err)
	doc := string(body)
	start := strings.Index(doc, "### Where each table lives")
	require.GreaterOrEqual(t, start, 0, "DESIGN.md has the section")
	section := doc[start:]
	if end := strings.Index(section[len("###"):], "\n### "); end >= 0 {
		section = section[:end+len("###")]
	}
	tableName := regexp.MustCompile("`([a-z_.]+)`")
	documented := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		owner := strings.TrimSpace(cells[2])
		for _, m := range tableName.FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = owner
		}
	}
	require.Equal(t, tableOwners, documented, "DESIGN.md's table and tableOwners differ")
	for _, c := range crossings {
		require.Contains(t, section, "`"+c.in+"`", "DESIGN.md does not name the crossing %s over %s", c.in, c.table)
	}
	for f := range exportedFragments {
		require.Contains(t, section, "`"+f+"`", "DESIGN.md does not name the exported fragment %s", f)
	}
	for f := range runtimeTables {
		require.Contains(t, section, "`"+f+"`", "DESIGN.md does not name %s, whose table is a Go value", f)
	}
}
