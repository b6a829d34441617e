package api

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/rebill/rebill/rebilltype"
)

// routeOnEscapedPath makes the router match r.URL.EscapedPath(). chi
// matches RawPath when the URL has one and Path otherwise, and RawPath is
// kept only when the encoding is not the canonical one: an id with %2F was
// matched escaped while a Cyrillic id was matched decoded. On the escaped
// path every segment is matched as sent, and unescapePathParams decodes
// each parameter exactly once.
func routeOnEscapedPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// unescapePathParams decodes the route's parameters, matched on the
// escaped path, so that handlers read the id the client encoded (chi's
// URLParam and the request's PathValue alike). EscapedPath holds only
// valid escapes; a parameter that would not decode names nothing.
func unescapePathParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			for i, key := range rctx.URLParams.Keys {
				v, err := url.PathUnescape(rctx.URLParams.Values[i])
				if err != nil {
					writeProblem(w, problemNotFound)
					return
				}
				rctx.URLParams.Values[i] = v
				if key != "*" {
					r.SetPathValue(key, v)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// methodsInOrder are the methods an Allow header may list, and the values
// of the metrics' method label (any other method is "other"): a label fed
// by the client must come from a closed set, or anyone could grow /metrics
// without a key.
var methodsInOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

// metricMethod is r's method as a label value.
func metricMethod(method string) string {
	if slices.Contains(methodsInOrder, method) {
		return method
	}
	return "other"
}

// allowedMethods lists the methods routed at r's path (HEAD wherever GET
// is): empty when the path does not exist.
func allowedMethods(r *http.Request) []string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return nil
	}
	path := r.URL.EscapedPath()
	var out []string
	for _, m := range methodsInOrder {
		probe := m
		if m == http.MethodHead {
			probe = http.MethodGet
		}
		if rctx.Routes.Match(chi.NewRouteContext(), probe, path) {
			out = append(out, m)
		}
	}
	return out
}

// methodNotAllowed answers a method the path does not route: 405 with
// Allow where the path exists, 404 where it does not (chi calls it for a
// method it does not know whatever the path).
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allowed := allowedMethods(r)
	if len(allowed) == 0 {
		writeProblem(w, problemNotFound)
		return
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeProblem(w, newProblem(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", "This path does not support this method; Allow lists those it does."))
}

// headAsGet serves HEAD on every GET route as the GET without its body
// (RFC 9110 §9.3.2): same status and headers.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		if r.Method != http.MethodHead || rctx == nil || rctx.Routes == nil {
			next.ServeHTTP(w, r)
			return
		}
		path := r.URL.EscapedPath()
		if rctx.Routes.Match(chi.NewRouteContext(), http.MethodHead, path) ||
			!rctx.Routes.Match(chi.NewRouteContext(), http.MethodGet, path) {
			next.ServeHTTP(w, r) // a handler of its own (River UI), or no GET to stand for
			return
		}
		rctx.RouteMethod = http.MethodGet
		next.ServeHTTP(headWriter{w}, r)
	})
}

// headWriter drops the body of a HEAD response.
type headWriter struct{ http.ResponseWriter }

func (h headWriter) Write(p []byte) (int, error) { return len(p), nil }

func (h headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// singleQueryValues refuses a query parameter given more than once: read
// as its first value it would let a proxy or a cache see one request and
// rebill another.
func (s *Server) singleQueryValues(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var errs rebilltype.Errors
		q := r.URL.Query()
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if len(q[k]) > 1 {
				errs.Add(queryField(k), "is given %d times: give it once", len(q[k]))
			}
		}
		if err := errs.Err(); err != nil {
			s.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// queryField names a query parameter in an error: by its name when it has
// a parameter's shape, else as "query", so that no typed text (a card
// number pasted as a name) is echoed.
func queryField(name string) string {
	if name == "" || len(name) > 40 {
		return "query"
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c == '_' || c == '.') {
			return "query"
		}
	}
	return name
}
