// Package openapitest checks, in tests, that what rebill really answers
// agrees with its OpenAPI document: every request a test sends and every
// response the server gives are validated against the document the server
// itself serves at GET /openapi.json, with pb33f/libopenapi-validator.
//
// Wrap a handler (httptest.NewServer(openapitest.Wrap(t, handler))) and a
// mismatch fails the test that made the call. What is checked, per
// exchange:
//   - the request against its operation (parameters, security, body); a
//     request the document forbids must not be answered 2xx;
//   - the response: its status is documented for the operation, its
//     content type and body match the documented schema (strictly: a
//     property the schema does not name is an error, formats are asserted);
//   - headers: every documented header's schema and required headers, and
//     no header beyond the transport's own that the response does not
//     document (Location, Retry-After, Idempotent-Replayed, ...);
//   - a documented response without content has no body;
//   - problem+json bodies: `status` equals the HTTP status, and the
//     problem type is listed, with that status, in the document's table;
//   - a HEAD is answered as its path's GET (a status the GET documents),
//     with no body.
//
// Requests to paths the document does not have must be answered 404 or
// 405 with a problem.
package openapitest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// TB is the part of testing.TB the checker reports to.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Name() string
}

// problemBase prefixes every problem type URI (see api/problem.go).
const problemBase = "https://rebill.dev/problems/"

// transportHeaders are response headers that belong to HTTP itself, not
// to the API contract: they need not be documented. X-Request-Id is on
// every response, and the Conventions document it once for all.
var transportHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Date": true,
	"Transfer-Encoding": true, "Connection": true, "Vary": true, "X-Content-Type-Options": true,
	"Cache-Control": true, "X-Request-Id": true,
}

// Checker validates exchanges against one OpenAPI document. It is safe for
// concurrent use.
type Checker struct {
	validator validator.Validator
	model     *v3.Document
	// problems maps each documented problem slug to its status, from the
	// table in info.description.
	problems map[string]int
}

var (
	checkersMu sync.Mutex
	checkers   = map[[32]byte]*Checker{}
)

// For returns the checker of an OpenAPI document, built once per document.
func For(document []byte) (*Checker, error) {
	sum := sha256.Sum256(document)
	checkersMu.Lock()
	defer checkersMu.Unlock()
	if c, ok := checkers[sum]; ok {
		return c, nil
	}
	doc, err := libopenapi.NewDocument(document)
	if err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build OpenAPI model: %w", err)
	}
	v, errs := validator.NewValidator(doc,
		config.WithFormatAssertions(),
		config.WithStrictMode(),
		// GET ignores Idempotency-Key (documented); a client may send it
		// anyway. Any request may carry X-Request-Id (the Conventions).
		config.WithStrictIgnoredHeadersExtra("Idempotency-Key", "Content-Encoding", "X-Content-Type-Options", "X-Request-Id"),
		// metadata, a gateway's commission_bps and the experiments record
		// of subscriptions and charges are maps (additionalProperties with
		// a schema), which strict mode would report key by key.
		config.WithStrictIgnorePaths("$.body.metadata.*", "$.body.**.metadata.*", "$.body.**.commission_bps.*",
			"$.body.experiments.*", "$.body.**.experiments.*"),
	)
	if len(errs) > 0 {
		return nil, fmt.Errorf("build validator: %v", errs)
	}
	c := &Checker{validator: v, model: &model.Model, problems: problemTable(model.Model.Info.Description)}
	checkers[sum] = c
	return c, nil
}

// ValidateDocument validates the document against the OpenAPI schema.
func (c *Checker) ValidateDocument() []string {
	_, errs := c.validator.ValidateDocument()
	return messages(errs)
}

// problemRow is one row of the problem types table: | `slug` | status | when |.
var problemRow = regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| ([0-9]{3}) \\|")

func problemTable(description string) map[string]int {
	out := map[string]int{}
	for _, m := range problemRow.FindAllStringSubmatch(description, -1) {
		status, _ := strconv.Atoi(m[2])
		out[m[1]] = status
	}
	return out
}

// Problems lists the problem slugs the document's table documents.
func (c *Checker) Problems() map[string]int { return c.problems }

// Wrap returns h with every exchange checked against the document h serves
// at GET /openapi.json; a mismatch is reported on t with the operation,
// the status and the validator's messages.
func Wrap(t TB, h http.Handler) http.Handler {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("openapitest: GET /openapi.json answered %d", rec.Code)
	}
	c, err := For(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("openapitest: %v", err)
	}
	return c.Wrap(t, h)
}

var exemptReplays sync.Map // test name -> reason

// ExemptReplays stops checking replayed responses (Idempotent-Replayed:
// true) in the named test, which replays an idempotency record it wrote by
// hand rather than one the server produced. Its requests and first
// responses are still checked.
func ExemptReplays(test, reason string) { exemptReplays.Store(test, reason) }

// Wrap returns h with every exchange checked; see the package doc.
func (c *Checker) Wrap(t TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			var err error
			body, err = io.ReadAll(r.Body)
			_ = r.Body.Close()
			if err != nil {
				t.Errorf("openapitest: read request body of %s %s: %v", r.Method, r.URL.Path, err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		probe := r.Clone(r.Context())
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.WriteHeader(http.StatusOK)
		}
		res := &http.Response{
			StatusCode: rec.status, Status: http.StatusText(rec.status),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: rec.header, Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())),
			ContentLength: int64(rec.body.Len()), Request: probe,
		}
		probe.Body = io.NopCloser(bytes.NewReader(body))
		if _, exempt := exemptReplays.Load(t.Name()); exempt && res.Header.Get("Idempotent-Replayed") == "true" {
			return
		}
		if problems := c.Check(probe, body, res, rec.body.Bytes()); len(problems) > 0 {
			t.Errorf("OpenAPI mismatch: %s %s (%s) -> %d:\n  %s\n  response body: %s",
				r.Method, r.URL.RequestURI(), c.operationID(probe), rec.status,
				strings.Join(problems, "\n  "), clip(rec.body.Bytes()))
		}
	})
}

// Check validates one exchange and returns what disagrees with the
// document (nothing when all agrees). reqBody and resBody are the bodies.
func (c *Checker) Check(req *http.Request, reqBody []byte, res *http.Response, resBody []byte) []string {
	var out []string
	pathItem, pathErrs, pathValue := paths.FindPath(req, c.model, nil)
	var op *v3.Operation
	if pathItem != nil {
		op = helpers.ExtractOperation(req, pathItem)
	}
	if op == nil {
		// Not an operation of the document: only "no such route" answers are right.
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
			out = append(out, fmt.Sprintf("no documented operation (%s), yet answered %d", strings.Join(messages(pathErrs), "; "), res.StatusCode))
		}
		return append(out, c.checkProblem(res, resBody)...)
	}

	if req.Method == http.MethodHead {
		return c.checkHead(op, res, resBody)
	}

	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if req.Header.Get("Content-Type") == "" && len(reqBody) > 0 {
		// The document says a body is read as JSON whatever the header
		// says; validate it as what the server reads.
		req.Header.Set("Content-Type", "application/json")
	}
	_, reqErrs := c.validator.ValidateHttpRequestSync(req)
	if len(reqErrs) > 0 && res.StatusCode < 300 {
		out = append(out, "the request breaks the document, yet was answered "+strconv.Itoa(res.StatusCode)+": "+
			strings.Join(messages(reqErrs), "; "))
	}

	res.Body = io.NopCloser(bytes.NewReader(resBody))
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	_, resErrs := c.validator.GetResponseBodyValidator().ValidateResponseBodyWithPathItem(req, res, pathItem, pathValue)
	for _, m := range messages(resErrs) {
		out = append(out, "response: "+m)
	}

	if documented := responseFor(op, res.StatusCode); documented != nil {
		declared := map[string]bool{}
		if documented.Headers != nil {
			for name := range documented.Headers.KeysFromOldest() {
				declared[http.CanonicalHeaderKey(name)] = true
			}
		}
		var extra []string
		for name := range res.Header {
			if !transportHeaders[name] && !declared[name] {
				extra = append(extra, name)
			}
		}
		sort.Strings(extra)
		for _, name := range extra {
			out = append(out, fmt.Sprintf("response header %s: %q is not documented for %d", name, res.Header.Get(name), res.StatusCode))
		}
		if (documented.Content == nil || documented.Content.Len() == 0) && len(bytes.TrimSpace(resBody)) > 0 {
			out = append(out, fmt.Sprintf("the response has a body (%s) but the document declares no content for %d",
				res.Header.Get("Content-Type"), res.StatusCode))
		}
	}
	return append(out, c.checkProblem(res, resBody)...)
}

// checkHead checks the answer to a HEAD, which is the GET's (op) without
// its body: a status the GET documents and no body at all.
func (c *Checker) checkHead(op *v3.Operation, res *http.Response, resBody []byte) []string {
	var out []string
	if len(resBody) > 0 {
		out = append(out, fmt.Sprintf("HEAD answered with a body of %d bytes", len(resBody)))
	}
	if responseFor(op, res.StatusCode) == nil && res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
		out = append(out, fmt.Sprintf("HEAD answered %d, which the GET does not document", res.StatusCode))
	}
	return out
}

// checkProblem checks a problem+json body against the problem table.
func (c *Checker) checkProblem(res *http.Response, body []byte) []string {
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		if res.StatusCode >= 400 {
			return []string{fmt.Sprintf("error status %d is not application/problem+json (Content-Type %q)", res.StatusCode, res.Header.Get("Content-Type"))}
		}
		return nil
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return []string{"problem body is not JSON: " + err.Error()}
	}
	var out []string
	if p.Status != res.StatusCode {
		out = append(out, fmt.Sprintf("problem status %d differs from the HTTP status %d", p.Status, res.StatusCode))
	}
	slug, ok := strings.CutPrefix(p.Type, problemBase)
	switch want, listed := c.problems[slug]; {
	case !ok:
		out = append(out, fmt.Sprintf("problem type %q is not under %s", p.Type, problemBase))
	case !listed:
		out = append(out, fmt.Sprintf("problem type %q is not in the document's problem table", slug))
	case want != res.StatusCode:
		out = append(out, fmt.Sprintf("problem type %q is documented as %d, answered %d", slug, want, res.StatusCode))
	}
	return out
}

func responseFor(op *v3.Operation, status int) *v3.Response {
	if op.Responses == nil {
		return nil
	}
	if r := op.Responses.Codes.GetOrZero(strconv.Itoa(status)); r != nil {
		return r
	}
	if r := op.Responses.Codes.GetOrZero(fmt.Sprintf("%dXX", status/100)); r != nil {
		return r
	}
	return op.Responses.Default
}

func (c *Checker) operationID(req *http.Request) string {
	pathItem, _, pathValue := paths.FindPath(req, c.model, nil)
	if pathItem == nil {
		return "no documented path"
	}
	if op := helpers.ExtractOperation(req, pathItem); op != nil && op.OperationId != "" {
		return op.OperationId
	}
	return strings.ToLower(req.Method) + " " + pathValue
}

// messages renders validation errors with their schema failures.
func messages(errs []*verrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		m := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			m += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			where := f.FieldPath
			if where == "" {
				where = f.KeywordLocation
			}
			m += fmt.Sprintf(" [%s: %s]", where, f.Reason)
		}
		out = append(out, m)
	}
	return out
}

func clip(b []byte) string {
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// recorder passes a response through while keeping a copy of its status,
// headers (as they were when the status was written) and body.
type recorder struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
		r.header = r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
