package api

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/API.md is a guide to the OpenAPI document, which is the contract.
// A guide that restates details drifts from it, so this one may only name
// what the document has: every code span in it is an operation or path of
// the document, a name the document defines (a property, parameter,
// schema, tag, enum value, ...), or text the document itself contains.
func TestAPIGuideNamesOnlyWhatTheDocumentHas(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../docs/API.md")
	require.NoError(t, err)
	problems, spans := apiGuideProblems(t, string(guide), openAPIDocument)
	require.Empty(t, problems)
	require.Greater(t, spans, 50, "the guide's code spans were not found")

	var doc struct {
		Info struct{ Description string } `json:"info"`
	}
	require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
	require.True(t, strings.Contains(doc.Info.Description, "a response enum (a status, an event `type`, a `failure_code`, a `reason`, ...) may gain values"),
		"the document must tell clients to tolerate new enum values")
	require.Contains(t, string(guide), "**a response enum may gain values**")
}

// The drift check is strict: each of these guides says something the
// document does not, and the check names it.
func TestAPIGuideCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	for guide, want := range map[string]string{
		"`GET /v1/invoices` lists invoices.":                      "GET /v1/invoices",
		"`POST /v1/subscriptions/{id}` updates one.":              "POST /v1/subscriptions/{id}",
		"A subscription has a `coupon`.":                          "coupon",
		"`status` may be `incomplete_expired`.":                   "incomplete_expired",
		"Send `Authorization: Token <key>`.":                      "Authorization: Token <key>",
		"Refunds are still to come.":                              "still to come",
		"See `info.summary.text`.":                                "info.summary.text",
		"The Additions part is the contract for what comes next.": "contract for what comes next",
	} {
		problems, _ := apiGuideProblems(t, guide, openAPIDocument)
		require.NotEmpty(t, problems, guide)
		require.Contains(t, strings.Join(problems, "\n"), want, guide)
	}
	problems, _ := apiGuideProblems(t, "`GET /v1/subscriptions/{id}`, `Subscription`, `receipt`, `captures_down`, "+
		"`enrollment_id`, `operations`, `/v1/dev/`, `requires_review`, `Idempotent-Replayed: true`.", openAPIDocument)
	require.Empty(t, problems, "what the document has passes")
}

var (
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	operation = regexp.MustCompile(`^(GET|POST|PUT|PATCH|DELETE|HEAD) (/\S*)$`)
	// notYet are phrases that present a capability as future: the
	// document is what the server does, so the guide has no future.
	notYet = []string{"still to come", "not yet implemented", "not implemented yet", "to be implemented",
		"coming soon", "planned", "contract for what comes next", "next capabilities"}
)

// apiGuideProblems returns what the guide says that the document lacks,
// and how many code spans it checked.
func apiGuideProblems(t *testing.T, guide string, document []byte) (problems []string, spans int) {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(document, &doc))
	names, texts := documentVocabulary(doc)
	paths := asMap(doc["paths"])

	for _, m := range codeSpan.FindAllStringSubmatch(guide, -1) {
		span := m[1]
		spans++
		if op := operation.FindStringSubmatch(span); op != nil {
			path, _, _ := strings.Cut(op[2], "?")
			item := asMap(paths[path])
			method := strings.ToLower(op[1])
			if method == "head" {
				method = "get" // every GET route serves HEAD (Conventions)
			}
			if item == nil || item[method] == nil {
				problems = append(problems, fmt.Sprintf("`%s`: the document has no such operation", span))
			}
			continue
		}
		if _, ok := paths[span]; ok || names[span] || strings.Contains(texts, span) || documentHasLocation(doc, span) {
			continue
		}
		problems = append(problems, fmt.Sprintf("`%s`: the document has no such name or text", span))
	}
	lower := strings.ToLower(guide)
	for _, phrase := range notYet {
		if strings.Contains(lower, phrase) {
			problems = append(problems, fmt.Sprintf("%q: the guide presents something as not done; the document is what the server does", phrase))
		}
	}
	return problems, spans
}

// documentHasLocation reports whether a dotted location such as
// `info.description` or `components.schemas` leads somewhere in the
// document.
func documentHasLocation(doc map[string]any, location string) bool {
	parts := strings.Split(location, ".")
	if len(parts) < 2 {
		return false
	}
	var at any = doc
	for _, p := range parts {
		m, ok := at.(map[string]any)
		if !ok {
			return false
		}
		if at, ok = m[p]; !ok {
			return false
		}
	}
	return true
}

// documentVocabulary collects the names the document defines (object keys
// anywhere: paths, properties, parameters, schemas, ...; the values of
// enums, consts, names, tags and operation ids) and all its text (every
// string, joined).
func documentVocabulary(doc map[string]any) (names map[string]bool, texts string) {
	names = map[string]bool{}
	var b strings.Builder
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, sub := range v {
				names[k] = true
				walk(sub, k)
			}
		case []any:
			for _, sub := range v {
				walk(sub, key)
			}
		case string:
			switch key {
			case "enum", "const", "name", "tags", "operationId", "in", "scheme", "type", "format":
				names[v] = true
			}
			b.WriteString(v)
			b.WriteString("\n")
		case nil, bool, float64:
			if key == "enum" || key == "const" {
				names[fmt.Sprint(v)] = true
			}
		}
	}
	walk(doc, "")
	return names, b.String()
}
