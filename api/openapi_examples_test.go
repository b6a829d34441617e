package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/pb33f/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// Clients copy the document's examples and generators turn them into
// fixtures, so a wrong example teaches a wrong contract. Every example is
// checked against the schema it illustrates, strictly: an object schema
// that lists its properties is read as closed, so a misspelt or stale
// field in an example is caught even where the API itself lets a response
// gain fields.
func TestOpenAPIExamplesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	checked, problems := checkExamples(t, openAPIDocument)
	require.Empty(t, problems)
	// The walk must reach every kind of place an example can sit, or an
	// empty walk would pass.
	for _, at := range []string{
		"/components/schemas/Subscription/examples/0",
		"/components/schemas/ClockUpdate/properties/advance/examples/0",
		"/components/parameters/IdempotencyKey/example",
		"/components/responses/BadRequest/content/application~1problem+json/examples/ValidationError",
	} {
		require.Contains(t, checked, at)
	}
}

// The check is strict: each of these edits makes one example wrong, and
// the check names it.
func TestOpenAPIExampleCheckCatchesWrongExamples(t *testing.T) {
	t.Parallel()
	var base map[string]any
	require.NoError(t, json.Unmarshal(openAPIDocument, &base))
	schemas := func(d map[string]any) map[string]any {
		return d["components"].(map[string]any)["schemas"].(map[string]any)
	}
	subscriptionExample := func(d map[string]any) map[string]any {
		return schemas(d)["Subscription"].(map[string]any)["examples"].([]any)[0].(map[string]any)
	}
	for name, tc := range map[string]struct {
		edit  func(d map[string]any)
		where string
	}{
		"required field missing": {func(d map[string]any) { delete(subscriptionExample(d), "receipt") },
			"/components/schemas/Subscription/examples/0"},
		"undocumented field": {func(d map[string]any) { subscriptionExample(d)["colour"] = "red" },
			"/components/schemas/Subscription/examples/0"},
		"undocumented field in a nested object": {func(d map[string]any) {
			subscriptionExample(d)["payment_method"].(map[string]any)["colour"] = "red"
		}, "/components/schemas/Subscription/examples/0"},
		"value outside the enum": {func(d map[string]any) { subscriptionExample(d)["status"] = "pending" },
			"/components/schemas/Subscription/examples/0"},
		"bad format": {func(d map[string]any) { subscriptionExample(d)["created_at"] = "yesterday" },
			"/components/schemas/Subscription/examples/0"},
		"media type example by reference": {func(d map[string]any) {
			d["components"].(map[string]any)["examples"].(map[string]any)["ValidationError"].(map[string]any)["value"].(map[string]any)["status"] = "400"
		}, "/components/responses/BadRequest/content/application~1problem+json/examples/ValidationError"},
		"reference to a missing example": {func(d map[string]any) {
			delete(d["components"].(map[string]any)["examples"].(map[string]any), "ValidationError")
		}, "/components/responses/BadRequest/content/application~1problem+json/examples/ValidationError"},
		"parameter example": {func(d map[string]any) {
			d["components"].(map[string]any)["parameters"].(map[string]any)["IdempotencyKey"].(map[string]any)["example"] = 42
		}, "/components/parameters/IdempotencyKey/example"},
		"example no schema reaches": {func(d map[string]any) {
			d["components"].(map[string]any)["examples"].(map[string]any)["Orphan"] = map[string]any{"value": map[string]any{}}
		}, "/components/examples/Orphan"},
	} {
		doc := deepCopyJSON(t, base)
		tc.edit(doc)
		edited, err := json.Marshal(doc)
		require.NoError(t, err)
		_, problems := checkExamples(t, edited)
		require.NotEmpty(t, problems, name)
		require.Contains(t, strings.Join(problems, "\n"), tc.where+":", name)
	}
}

// exampleAt is one example and the schema it must satisfy, both as JSON
// pointers into the document.
type exampleAt struct {
	at, schema string
	value      any
}

// checkExamples validates every example of the document (in schemas,
// parameters, headers and media types, inline or by reference to
// components/examples) and returns the pointers it checked and what is
// wrong.
func checkExamples(t *testing.T, document []byte) (checked []string, problems []string) {
	t.Helper()
	// Numbers keep their exact value (json.Number) for the validator.
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(document))
	require.NoError(t, err)
	doc := raw.(map[string]any)

	w := &exampleWalker{doc: doc, referenced: map[string]bool{}}
	w.walkDocument()
	problems = append(problems, w.problems...)
	for name := range asMap(asMap(doc["components"])["examples"]) {
		if !w.referenced[name] {
			problems = append(problems, fmt.Sprintf("/components/examples/%s: no schema reaches it, so nothing checks it", name))
		}
	}

	// Validate against a copy whose listed-property objects are closed.
	closed, err := jsonschema.UnmarshalJSON(bytes.NewReader(document))
	require.NoError(t, err)
	cw := &exampleWalker{doc: closed.(map[string]any), referenced: map[string]bool{}, onSchema: closeObject}
	cw.walkDocument()

	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const loc = "openapi.json"
	require.NoError(t, c.AddResource(loc, closed))
	for _, ex := range w.examples {
		checked = append(checked, ex.at)
		sch, err := c.Compile(loc + "#" + (&url.URL{Fragment: ex.schema}).EscapedFragment())
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: compile its schema %s: %v", ex.at, ex.schema, err))
			continue
		}
		if err := sch.Validate(ex.value); err != nil {
			problems = append(problems, fmt.Sprintf("%s: does not match %s: %v", ex.at, ex.schema, err))
		}
	}
	sort.Strings(problems)
	return checked, problems
}

// closeObject reads an object schema that lists its properties as closed,
// as a strict validator does. Members of allOf stay open (their
// siblings add properties), as do the subschemas that only test a
// condition (if, not, contains, propertyNames).
func closeObject(s map[string]any, via string) {
	switch via {
	case "allOf", "if", "not", "contains", "propertyNames":
		return
	}
	_, props := s["properties"]
	_, patterns := s["patternProperties"]
	_, additional := s["additionalProperties"]
	_, unevaluated := s["unevaluatedProperties"]
	if (props || patterns) && !additional && !unevaluated {
		s["unevaluatedProperties"] = false
	}
}

type exampleWalker struct {
	doc        map[string]any
	examples   []exampleAt
	referenced map[string]bool // components/examples reached by $ref
	problems   []string
	// onSchema, when set, sees every schema object and the keyword it
	// was reached by.
	onSchema func(s map[string]any, via string)
}

var operationMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func (w *exampleWalker) walkDocument() {
	for _, section := range []string{"paths", "webhooks"} {
		for path, item := range asMap(w.doc[section]) {
			w.pathItem("/"+section+"/"+escapePointer(path), asMap(item))
		}
	}
	comps := asMap(w.doc["components"])
	for name, s := range asMap(comps["schemas"]) {
		w.schema("/components/schemas/"+escapePointer(name), s, "")
	}
	for _, kind := range []string{"parameters", "headers"} {
		for name, p := range asMap(comps[kind]) {
			w.holder("/components/"+kind+"/"+escapePointer(name), asMap(p))
		}
	}
	for name, r := range asMap(comps["responses"]) {
		w.response("/components/responses/"+escapePointer(name), asMap(r))
	}
	for name, b := range asMap(comps["requestBodies"]) {
		w.content("/components/requestBodies/"+escapePointer(name), asMap(b))
	}
	for name, item := range asMap(comps["pathItems"]) {
		w.pathItem("/components/pathItems/"+escapePointer(name), asMap(item))
	}
}

func (w *exampleWalker) pathItem(ptr string, item map[string]any) {
	w.parameters(ptr, item)
	for _, m := range operationMethods {
		op := asMap(item[m])
		if op == nil {
			continue
		}
		at := ptr + "/" + m
		w.parameters(at, op)
		if body := asMap(op["requestBody"]); body != nil {
			w.content(at+"/requestBody", body)
		}
		for status, r := range asMap(op["responses"]) {
			w.response(at+"/responses/"+escapePointer(status), asMap(r))
		}
	}
}

func (w *exampleWalker) parameters(ptr string, owner map[string]any) {
	for i, p := range asSlice(owner["parameters"]) {
		w.holder(fmt.Sprintf("%s/parameters/%d", ptr, i), asMap(p))
	}
}

func (w *exampleWalker) response(ptr string, r map[string]any) {
	if _, ref := r["$ref"]; ref {
		return // checked where it is defined
	}
	for name, h := range asMap(r["headers"]) {
		w.holder(ptr+"/headers/"+escapePointer(name), asMap(h))
	}
	w.content(ptr, r)
}

func (w *exampleWalker) content(ptr string, owner map[string]any) {
	if _, ref := owner["$ref"]; ref {
		return
	}
	for mt, m := range asMap(owner["content"]) {
		w.holder(ptr+"/content/"+escapePointer(mt), asMap(m))
	}
}

// holder is a parameter, header or media type: an object with a schema
// and its example or named examples.
func (w *exampleWalker) holder(ptr string, h map[string]any) {
	if _, ref := h["$ref"]; ref || h == nil {
		return
	}
	schemaPtr := ptr + "/schema"
	s, hasSchema := h["schema"]
	if hasSchema {
		w.schema(schemaPtr, s, "")
	}
	if v, ok := h["example"]; ok {
		w.add(ptr+"/example", schemaPtr, v, hasSchema)
	}
	for name, e := range asMap(h["examples"]) {
		at := ptr + "/examples/" + escapePointer(name)
		ex := asMap(e)
		if ref, ok := ex["$ref"].(string); ok {
			target, found := strings.CutPrefix(ref, "#/components/examples/")
			w.referenced[target] = true
			if ex = asMap(asMap(asMap(w.doc["components"])["examples"])[target]); !found || ex == nil {
				w.problems = append(w.problems, fmt.Sprintf("%s: $ref %s names no example in components/examples", at, ref))
				continue
			}
		}
		v, ok := ex["value"]
		if !ok {
			w.problems = append(w.problems, fmt.Sprintf("%s: no value to check", at))
			continue
		}
		w.add(at, schemaPtr, v, hasSchema)
	}
}

func (w *exampleWalker) add(at, schemaPtr string, v any, hasSchema bool) {
	if !hasSchema {
		w.problems = append(w.problems, fmt.Sprintf("%s: an example without a schema to check it against", at))
		return
	}
	w.examples = append(w.examples, exampleAt{at: at, schema: schemaPtr, value: v})
}

// schema records a schema's own examples and walks its subschemas.
func (w *exampleWalker) schema(ptr string, v any, via string) {
	s := asMap(v)
	if s == nil {
		return // a boolean schema
	}
	if w.onSchema != nil {
		w.onSchema(s, via)
	}
	for i, e := range asSlice(s["examples"]) {
		w.add(fmt.Sprintf("%s/examples/%d", ptr, i), ptr, e, true)
	}
	if e, ok := s["example"]; ok {
		w.add(ptr+"/example", ptr, e, true)
	}
	for _, kw := range []string{"properties", "patternProperties", "$defs", "dependentSchemas"} {
		for name, sub := range asMap(s[kw]) {
			w.schema(ptr+"/"+kw+"/"+escapePointer(name), sub, kw)
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
		"not", "if", "then", "else", "contains", "propertyNames"} {
		if sub, ok := s[kw]; ok {
			w.schema(ptr+"/"+kw, sub, kw)
		}
	}
	for _, kw := range []string{"prefixItems", "allOf", "anyOf", "oneOf"} {
		for i, sub := range asSlice(s[kw]) {
			w.schema(fmt.Sprintf("%s/%s/%d", ptr, kw, i), sub, kw)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func deepCopyJSON(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}
