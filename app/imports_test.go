package app_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/rebill/rebill/"

// allowedImports pins the layout: for each of rebill's packages, the
// rebill packages it may import (the platform leaves aside), the wiring
// root, its tools and soak included. api calls the use cases (usecases),
// which compose the domain; renewals composes
// subscriptions and charges; domain packages never import the HTTP layer,
// and subscriptions and charges know nothing of each other's tables.
// charges holds the charge state machine and drives the gateways through
// charges/gateway/fleet (breakers, health, routing, call metrics), which
// knows nothing of charges; it posts fines through the registry port
// charges/registry, a leaf whose adapters and test kit import only it.
// enrollments imports neither charges nor its postings: autopay hands
// each the other's half of a bill identity's release. zhkh reports
// captured housing payments to GIS ZhKH through its port zhkh/party, a
// leaf like charges/registry; autopay hands it each capture.
var allowedImports = map[string][]string{
	"api":                                    {"api/idempotency", "apikeys", "apiobjects", "autopay", "charges", "charges/gateway/fleet", "charges/gateway/sim", "charges/registry/sim", "enrollments", "experiments", "experiments/stats", "notify", "books", "reports", "subscriptions", "subscriptions/period", "usecases", "velocity", "zhkh", "zhkh/party/sim"},
	"api/idempotency":                        nil,
	"api/openapitest":                        nil,
	"apikeys":                                nil,
	"usecases":                               {"autopay", "charges", "enrollments", "notify", "renewals", "subscriptions", "vault", "velocity"},
	"renewals":                               {"charges", "experiments", "subscriptions", "subscriptions/period"},
	"subscriptions":                          {"subscriptions/period", "subscriptions/proration", "vault"},
	"subscriptions/period":                   nil,
	"subscriptions/proration":                nil,
	"charges":                                {"charges/gateway", "charges/gateway/fleet", "charges/registry", "experiments", "vault"},
	"experiments":                            {"experiments/stats", "subscriptions/period"},
	"experiments/stats":                      nil,
	"charges/gateway":                        nil,
	"charges/gateway/fleet":                  {"charges/gateway"},
	"charges/gateway/sim":                    {"charges/gateway"},
	"fault":                                  nil,
	"rebilltype":                             nil,
	"migrations":                             nil,
	"notify":                                 {"apiobjects", "charges", "enrollments", "experiments", "subscriptions", "client/signature"},
	"apiobjects":                             {"charges", "enrollments", "subscriptions"},
	"cmd/rebill":                             {"app"},
	"ops":                                    nil,
	"charges/gateway/yookassa":               {"charges/gateway"},
	"charges/gateway/stripe":                 {"charges/gateway"},
	"charges/gateway/testkit/gatewaytest":    {"charges/gateway"},
	"charges/gateway/testkit/stripetest":     nil,
	"enrollments":                            {"charges/registry", "subscriptions", "vault"},
	"autopay":                                {"charges", "charges/gateway", "enrollments", "subscriptions", "zhkh"},
	"autopay/billsource":                     {"autopay", "enrollments"},
	"autopay/billsource/testkit/sourcefake":  {"autopay/billsource"},
	"autopay/billsource/testkit/conformance": {"autopay", "enrollments"},
	"charges/registry":                       nil,
	"charges/registry/agentapi":              {"charges/registry"},
	"charges/registry/sim":                   {"charges/registry"},
	"charges/registry/testkit/agentfake":     nil,
	"charges/registry/testkit/registrytest":  {"charges/registry"},
	"zhkh":                                   {"zhkh/party"},
	"zhkh/party":                             nil,
	"zhkh/party/partyapi":                    {"zhkh/party"},
	"zhkh/party/sim":                         {"zhkh/party"},
	"zhkh/party/testkit/partyfake":           nil,
	"zhkh/party/testkit/partytest":           {"zhkh/party"},
	"audit":                                  {"audit/billcheck", "charges", "charges/gateway", "charges/registry", "enrollments", "subscriptions"},
	"audit/billcheck":                        nil,
	"books":                                  {"charges", "charges/gateway", "charges/registry"},
	"reports":                                {"charges"},
	"inspector":                              {"charges"},
	"velocity":                               nil,
	"vault":                                  {"charges/gateway"},
	"client/signature":                       nil,
	"client":                                 {"client/signature"},
	"console":                                {"apikeys", "charges", "charges/gateway/fleet", "enrollments", "experiments", "experiments/stats", "notify", "books", "reports", "subscriptions", "subscriptions/period", "usecases"},
	"soak":                                   nil,
	"drill":                                  nil, // the failover drill: tests only
	"e2e":                                    nil, // tests only: their imports are a test's

	// The wiring root builds every part; bench drives a filled database.
	"app": {"api", "api/idempotency", "apikeys", "audit", "autopay", "autopay/billsource", "charges", "charges/gateway",
		"charges/gateway/fleet", "charges/gateway/sim", "charges/gateway/stripe", "charges/gateway/yookassa", "console",
		"enrollments", "experiments", "app/config", "charges/registry", "charges/registry/agentapi", "charges/registry/sim", "charges/registry/testkit/agentfake", "inspector", "bench",
		"platform/pgembed", "migrations", "notify", "books", "reports", "renewals", "subscriptions", "usecases", "vault", "velocity",
		"zhkh", "zhkh/party", "zhkh/party/partyapi", "zhkh/party/sim", "zhkh/party/testkit/partyfake"},
	"bench":            {"charges", "platform/pgembed", "migrations", "subscriptions"},
	"app/config":       nil,
	"cmd/rebill-bench": {"app", "app/config", "bench", "charges", "charges/gateway", "charges/gateway/sim", "notify", "platform/pgembed", "renewals"},

	// Platform leaves (see platform): none knows a domain package.
	"platform/clock":       nil,
	"platform/fsm":         nil,
	"platform/groupcommit": nil,
	"platform/metrics":     nil,
	"platform/mtls":        nil,
	"platform/pg":          nil,
	"platform/riverjob":    nil,
	"platform/sameorigin":  nil,
	"platform/secrets":     nil,
	"platform/startup":     nil,
	"platform/tracing":     nil,
	"platform/validate":    nil,

	// Test kits, imported by tests only.
	"testkit/browsertest": nil,
	"testkit/clientlive":  nil,
	"testkit/dbtest":      {"platform/pgembed", "migrations"},
	"testkit/docstest":    nil,
	"testkit/fsmtest":     nil,
	"testkit/opstest":     {"charges/gateway/sim", "enrollments", "subscriptions"},
	"platform/pgembed":    nil,
	"testkit/proctest":    nil,
	"testkit/testsupport": nil,
}

// platform are the leaves any package may import: the database handle,
// the clock, the state machines' table, River's rules, metrics, tracing,
// secrets and validation helpers; with them fault (the error vocabulary)
// and rebilltype (the shared types). Every other package (the wiring
// root and its configuration, bench, the test kits) is imported only
// where its importer's row says so.
var platform = map[string]bool{
	"platform/clock": true, "platform/fsm": true, "platform/groupcommit": true,
	"platform/metrics": true, "platform/mtls": true, "platform/pg": true, "platform/riverjob": true,
	"platform/sameorigin": true, "platform/secrets": true, "platform/startup": true, "platform/tracing": true,
	"platform/validate": true,
}

// ownedImports are libraries that one package wraps for all the others:
// the circuit breaker is gateway plumbing, not the charge state machine's.
var ownedImports = map[string]string{
	"github.com/sony/gobreaker/v2": "charges/gateway/fleet",
	// Flags are evaluated in one place, behind experiments.Set.
	"github.com/open-feature/go-sdk/openfeature":          "experiments",
	"github.com/open-feature/go-sdk/openfeature/isolated": "experiments",
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

func TestImportsFollowTheLayout(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json", module+"...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var pkg listedPackage
		require.NoError(t, dec.Decode(&pkg))
		name := strings.TrimPrefix(pkg.ImportPath, module)
		for _, imp := range pkg.Imports {
			if owner, pinned := ownedImports[imp]; pinned {
				require.Equal(t, owner, name, "%s imports %s: only %s may", name, imp, owner)
			}
		}
		allowed, known := allowedImports[name]
		require.True(t, known, "package %s is not in the layout: add it to allowedImports with its allowed imports", name)
		seen[name] = true
		for _, imp := range pkg.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || platform[dep] || dep == "fault" || dep == "rebilltype" {
				continue // the error vocabulary and the shared types are every package's
			}
			require.Contains(t, allowed, dep, "%s must not import %s", name, dep)
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, "github.com/go-chi/") {
				require.True(t, strings.HasPrefix(name, "api") || name == "console", "%s imports %s: only the HTTP edges (api, console) route HTTP", name, imp)
			}
		}
	}
	for name := range allowedImports {
		require.True(t, seen[name], "package %s listed in the layout no longer exists", name)
	}
}

// Boilerplate that every store or job kind would otherwise repeat lives
// once: the database handle stores take (platform/pg.DBTX) and River's
// uniqueness by state (platform/riverjob). A package that declares its own
// handle interface or lists job states for uniqueness drifts from the rest.
func TestSharedBoilerplateIsDeclaredOnce(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var handles, uniques []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.InterfaceType:
				for _, m := range n.Methods.List {
					for _, id := range m.Names {
						if id.Name == "QueryRow" && dir != "platform/pg" {
							handles = append(handles, fset.Position(m.Pos()).String())
						}
					}
				}
			case *ast.CompositeLit:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "UniqueOpts" && dir != "platform/riverjob" {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "ByState" {
								uniques = append(uniques, fset.Position(n.Pos()).String())
							}
						}
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, handles, "a database handle interface outside platform/pg: take pg.DBTX")
	require.Empty(t, uniques, "uniqueness by job state outside platform/riverjob: use its rules")
}

// chargesJob names a job argument type of the charge pipeline (AuthorizeArgs,
// CaptureArgs...): an identifier of package charges ending in Args.
func chargesJob(name string) bool { return strings.HasSuffix(name, "Args") }

// The pipeline's River jobs are its own: other packages drive it through
// the verbs of charges.Store (Create, CreateForBill, StopSubscription, HoldPosted...), which
// enqueue the jobs and write the rows, so no code outside charges names a
// job argument type of it. Tests may, to look at the jobs a step left.
func TestOnlyChargesEnqueuesItsJobs(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json", module+"...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var offenders []string
	packages := 0
	for dec.More() {
		var pkg struct {
			ImportPath string
			Dir        string
			GoFiles    []string
		}
		require.NoError(t, dec.Decode(&pkg))
		name := strings.TrimPrefix(pkg.ImportPath, module)
		if name == "charges" || strings.HasPrefix(name, "charges/") {
			continue
		}
		packages++
		for _, f := range pkg.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(pkg.Dir, f), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			alias := ""
			for _, imp := range file.Imports {
				if path, _ := strconv.Unquote(imp.Path.Value); path == module+"charges" {
					alias = "charges"
					if imp.Name != nil {
						alias = imp.Name.Name
					}
				}
			}
			if alias == "" {
				continue
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == alias && chargesJob(sel.Sel.Name) {
					offenders = append(offenders, name+"/"+f+": charges."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	require.Greater(t, packages, 10, "go list found rebill's packages")
	require.Empty(t, offenders, "packages outside charges name its job argument types; use a verb of charges.Store")
}

// The benchmark is a command of its own (cmd/rebill-bench): the server
// binary links none of its code, directly or through another package.
func TestServerBinaryLinksNoBenchmark(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", module+"cmd/rebill").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"app", "go list found the server's dependencies")
	for _, dep := range deps {
		require.NotEqual(t, module+"bench", dep, "cmd/rebill links the benchmark")
		require.False(t, strings.HasPrefix(dep, module+"cmd/rebill-bench"), "cmd/rebill links %s", dep)
	}
}
