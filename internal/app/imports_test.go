package app_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/rebill/rebill/"

// allowedImports pins the layout: for each of rebill's packages, the
// rebill packages it may import (internal helpers aside). api calls the
// use cases of billing; billing composes the domain; scheduler composes
// subscriptions and charges; domain packages never import the HTTP layer,
// and subscriptions and charges know nothing of each other's tables.
var allowedImports = map[string][]string{
	"api":                               {"api/idempotency", "apikeys", "autopay", "billing", "charges", "charges/gateway/sim", "enrollments", "notify", "notify/objects", "reconcile", "registry", "reports", "subscriptions", "subscriptions/period", "velocity"},
	"api/idempotency":                   nil,
	"api/openapitest":                   nil,
	"apikeys":                           {"subscriptions"},
	"billing":                           {"autopay", "charges", "enrollments", "notify", "scheduler", "subscriptions", "vault", "velocity"},
	"scheduler":                         {"charges", "subscriptions", "subscriptions/period"},
	"subscriptions":                     {"subscriptions/period"},
	"subscriptions/period":              nil,
	"charges":                           {"charges/gateway"},
	"charges/gateway":                   nil,
	"charges/gateway/sim":               {"charges/gateway"},
	"migrations":                        nil,
	"notify":                            {"charges", "enrollments", "notify/objects", "subscriptions", "webhook/signature"},
	"notify/objects":                    {"charges", "enrollments", "subscriptions"},
	"cmd/rebill":                        {"internal/app"},
	"ops":                               nil,
	"charges/gateway/yookassa":          {"charges/gateway"},
	"charges/gateway/stripe":            {"charges/gateway"},
	"charges/gateway/stripe/stripetest": nil,
	"enrollments":                       {"charges", "registry", "subscriptions"},
	"autopay":                           {"charges", "enrollments", "subscriptions"},
	"registry":                          {"charges"},
	"audit":                             {"audit/billcheck", "charges", "charges/gateway", "enrollments", "subscriptions"},
	"audit/billcheck":                   nil,
	"reconcile":                         {"charges", "charges/gateway"},
	"reports":                           {"charges"},
	"inspector":                         {"charges"},
	"velocity":                          nil,
	"vault":                             {"charges/gateway"},
	"webhook/signature":                 nil,
	"client":                            {"webhook/signature"},
	"fault":                             nil,
	"console":                           {"apikeys", "billing", "charges", "enrollments", "reconcile", "reports", "subscriptions", "subscriptions/period"},
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
		if strings.HasPrefix(name, "internal/") || name == "soak" {
			continue // helpers and tools wire or test everything
		}
		allowed, known := allowedImports[name]
		require.True(t, known, "package %s is not in the layout: add it to allowedImports with its allowed imports", name)
		seen[name] = true
		for _, imp := range pkg.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || strings.HasPrefix(dep, "internal/") || dep == "fault" {
				continue // fault is the error vocabulary every package shares
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
