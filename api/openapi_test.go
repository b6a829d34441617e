package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
)

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
	return doc
}

// The served document and the router must list the same operations.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	s := NewServer(Deps{Dev: &Dev{}})
	routes := map[string]bool{}
	require.NoError(t, chi.Walk(s.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes[strings.ToLower(method)+" "+route] = true
		return nil
	}))

	documented := map[string]bool{}
	for path, ops := range loadOpenAPI(t).Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete":
				documented[method+" "+path] = true
			}
		}
	}
	require.Equal(t, sortedKeys(documented), sortedKeys(routes))
}

// Every field a response carries is documented, and every documented
// field is sent: clients generate code from the document.
func TestOpenAPISchemasMatchResponses(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for schema, typ := range map[string]reflect.Type{
		"Subscription":  reflect.TypeOf(subscriptionJSON{}),
		"Charge":        reflect.TypeOf(chargeJSON{}),
		"Event":         reflect.TypeOf(eventJSON{}),
		"ApiKeyCreated": reflect.TypeOf(CreatedKey{}),
	} {
		var fields []string
		for i := 0; i < typ.NumField(); i++ {
			fields = append(fields, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
		}
		sort.Strings(fields)
		require.Equal(t, sortedKeys(doc.Components.Schemas[schema].Properties), fields, schema)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
