package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/rebilltype"

	"github.com/rebill/rebill/zhkh"
)

// The request/response validation of the whole test suite lives in
// package openapitest and is hooked into the test harnesses
// (api/harness_test.go, e2e/harness_test.go): every exchange a
// test makes is checked against this document. The tests here keep the
// document and the code in step where no request reaches.

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
	s := NewServer(Deps{Dev: &Dev{}, RiverUI: http.NotFoundHandler(), Zhkh: (*zhkh.Reporter)(nil)})
	routes := map[string]bool{}
	require.NoError(t, chi.Walk(s.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route == "/riverui" || route == "/riverui/*" { // River UI: a browser application outside the document
			return nil
		}
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
		"Subscription":      reflect.TypeOf(subscriptionJSON{}),
		"Period":            reflect.TypeOf(apiobjects.Period{}),
		"Pause":             reflect.TypeOf(apiobjects.Pause{}),
		"PaymentMethod":     reflect.TypeOf(apiobjects.PaymentMethod{}),
		"Charge":            reflect.TypeOf(chargeJSON{}),
		"Event":             reflect.TypeOf(eventJSON{}),
		"NotificationEvent": reflect.TypeOf(notifyEventJSON{}),
		"WebhookEndpoint":   reflect.TypeOf(webhookEndpointJSON{}),
		"Delivery":          reflect.TypeOf(deliveryJSON{}),
		"Redelivery":        reflect.TypeOf(redeliveryJSON{}),
		"Actor":             reflect.TypeOf(actorJSON{}),
		"ApiKeyCreated":     reflect.TypeOf(CreatedKey{}),
		"Clock":             reflect.TypeOf(clockJSON{}),
		"LedgerEntry":       reflect.TypeOf(sim.LedgerEntry{}),
		"Faults":            reflect.TypeOf(sim.Faults{}),
		"FieldError":        reflect.TypeOf(rebilltype.FieldError{}),
	} {
		fields := map[string]bool{}
		for i := 0; i < typ.NumField(); i++ {
			fields[strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]] = true
		}
		documented := map[string]bool{}
		for name := range doc.Components.Schemas[schema].Properties {
			documented[name] = true
		}
		require.Equal(t, sortedKeys(documented), sortedKeys(fields), schema)
	}
}

// The document is a valid OpenAPI 3.1 document.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	c, err := openapitest.For(openAPIDocument)
	require.NoError(t, err)
	require.Empty(t, c.ValidateDocument())
	require.NotEmpty(t, c.Problems(), "the problem types table is found in info.description")
}

// The problems the code writes are in the document's table with their
// status (the live check covers the ones the tests provoke; these are the
// fixed ones).
func TestOpenAPIListsTheFixedProblems(t *testing.T) {
	t.Parallel()
	c, err := openapitest.For(openAPIDocument)
	require.NoError(t, err)
	for _, p := range []Problem{problemUnauthorized, problemForbidden, problemNotFound, problemInternal, problemUnavailable,
		problemBodyTooLarge, validationProblem()} {
		slug := strings.TrimPrefix(p.Type, problemBase)
		require.Equal(t, p.Status, c.Problems()[slug], slug)
	}
}

// The live check is strict: each of these exchanges disagrees with the
// document in one way, and the checker says so. A checker that let them
// pass would make the suite-wide validation worthless.
func TestOpenAPICheckerCatchesMismatches(t *testing.T) {
	t.Parallel()
	c, err := openapitest.For(openAPIDocument)
	require.NoError(t, err)

	const id = "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d"
	charge := map[string]any{
		"id": id, "subscription_id": id, "enrollment_id": nil, "period_key": "2026-12-01", "key": id + ":2026-12-01",
		"amount": 49900, "currency": "RUB", "gateway": "sim1", "status": "succeeded", "attempt_count": 1,
		"next_attempt_at": nil, "failure_code": nil, "review_reason": nil, "review_code": nil, "confirmation_required": false, "confirmed_amount": nil,
		"created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z", "experiments": map[string]any{}, "amount_refunded": 0,
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for key, val := range m {
			out[key] = val
		}
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	problem := func(slug string, status int) map[string]any {
		return map[string]any{"type": problemBase + slug, "title": "t", "status": status, "detail": "d"}
	}
	type exchange struct {
		method, path string
		header       http.Header
		body         string
		status       int
		resHeader    http.Header
		resBody      any
	}
	auth := http.Header{"Authorization": {"Bearer k"}}
	post := http.Header{"Authorization": {"Bearer k"}, "Idempotency-Key": {"k1"}, "Content-Type": {"application/json"}}
	jsonHdr := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	problemHdr := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/problem+json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	run := func(e exchange) []string {
		req := httptest.NewRequest(e.method, e.path, strings.NewReader(e.body))
		req.Header = e.header.Clone()
		var resBody []byte
		if e.resBody != nil {
			resBody, err = json.Marshal(e.resBody)
			require.NoError(t, err)
		}
		res := &http.Response{StatusCode: e.status, Header: e.resHeader, Body: io.NopCloser(bytes.NewReader(resBody)), Request: req}
		return c.Check(req, []byte(e.body), res, resBody)
	}

	good := exchange{method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr(), resBody: charge}
	require.Empty(t, run(good), "a documented exchange passes")
	ok404 := exchange{method: "GET", path: "/v1/nothing", header: auth, status: 404, resHeader: problemHdr(), resBody: problem("not-found", 404)}
	require.Empty(t, run(ok404), "an unknown path answered 404 passes")

	for name, e := range map[string]exchange{
		"required field missing": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr(),
			resBody: with(charge, "status", nil)},
		"undocumented field": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr(),
			resBody: with(charge, "colour", "red")},
		"wrong enum value": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr(),
			resBody: with(charge, "status", "pending")},
		"bad date-time": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr(),
			resBody: with(charge, "created_at", "yesterday")},
		"undocumented status": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 418, resHeader: problemHdr(),
			resBody: problem("not-found", 418)},
		"undocumented header": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 200, resHeader: jsonHdr("Retry-After", "1"),
			resBody: charge},
		"error not problem+json": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 404, resHeader: jsonHdr(),
			resBody: problem("not-found", 404)},
		"problem type not in the table": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 404, resHeader: problemHdr(),
			resBody: problem("gone-fishing", 404)},
		"problem status differs": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 404, resHeader: problemHdr(),
			resBody: problem("not-found", 400)},
		"problem type with another status": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 409, resHeader: problemHdr(),
			resBody: problem("not-found", 409)},
		"503 without Retry-After": {method: "GET", path: "/v1/charges/" + id, header: auth, status: 503, resHeader: problemHdr(),
			resBody: problem("service-unavailable", 503)},
		"unknown path answered 200": {method: "GET", path: "/v1/nothing", header: auth, status: 200, resHeader: jsonHdr(),
			resBody: map[string]any{}},
		"invalid request accepted": {method: "POST", path: "/v1/dev/clock", header: post, body: `{"advance":"1h","colour":"red"}`,
			status: 200, resHeader: jsonHdr(), resBody: map[string]any{"now": "2026-12-01T00:00:00Z"}},
		"request without Idempotency-Key accepted": {method: "POST", path: "/v1/dev/clock", header: auth, body: `{"advance":"1h"}`,
			status: 200, resHeader: jsonHdr(), resBody: map[string]any{"now": "2026-12-01T00:00:00Z"}},
		"Location on a 409": {method: "POST", path: "/v1/api-keys", header: post, body: `{"role":"admin"}`,
			status: 409, resHeader: problemHdr("Location", "/v1/api-keys/x"), resBody: problem("idempotency-key-in-use", 409)},
	} {
		require.NotEmpty(t, run(e), name)
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
